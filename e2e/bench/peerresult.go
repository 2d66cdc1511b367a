package bench

// Peer mode's result (result.json): each controller's figures per load, Trainyard's over
// upstream's, and issue 17's targets. peerreport.go renders it.

import (
	"fmt"
	"time"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// PeerResult is peer mode's result.json. Each figure is per controller; Ratios
// are Trainyard's over upstream's.
type PeerResult struct {
	Mode            string    `json:"mode"`
	Note            string    `json:"note,omitempty"`
	Upstream        string    `json:"upstream"`
	Rounds          int       `json:"rounds"`
	Parallelism     int       `json:"parallelism"`
	NumNodes        int32     `json:"numNodes"`
	ControllerQPS   float32   `json:"controllerQPS"`
	ControllerBurst int32     `json:"controllerBurst"`
	StartedAt       time.Time `json:"startedAt"`
	CPUs            int       `json:"cpus"`
	GoVersion       string    `json:"goVersion"`
	// Loads are the admission loads by size, then the lifecycle load.
	Loads []PeerLoad `json:"loads"`
	// Ratios are Trainyard ÷ upstream, keyed by figure and load (see peerRatios);
	// a figure that is 0 for upstream has none.
	Ratios map[string]float64 `json:"ratios"`
	// RSSSlopes is how each controller's peak RSS grows between consecutive
	// admission sizes (issue 17's item 4 asks for it from 2,000 to 10,000 to 50,000).
	RSSSlopes []RSSSlope `json:"rssSlopes,omitempty"`
	Targets   []Target   `json:"targets"`
}

// RSSSlope is the growth of peak RSS from admission size From to size To, in
// bytes per 1,000 TrainJobs (with their JobSets), for each controller.
type RSSSlope struct {
	From      int     `json:"from"`
	To        int     `json:"to"`
	Trainyard float64 `json:"trainyardBytesPer1000"`
	Upstream  float64 `json:"upstreamBytesPer1000"`
}

// rssSlopes computes the RSSSlopes between consecutive admission loads of
// increasing size.
func rssSlopes(loads []PeerLoad) []RSSSlope {
	var out []RSSSlope
	var prev *PeerLoad
	for i := range loads {
		l := &loads[i]
		if l.Mode != ModeAdmission {
			continue
		}
		if prev != nil && l.N > prev.N {
			per1000 := 1000 / float64(l.N-prev.N)
			out = append(out, RSSSlope{
				From: prev.N, To: l.N,
				Trainyard: round3(float64(l.Trainyard.PeakRSSBytes-prev.Trainyard.PeakRSSBytes) * per1000),
				Upstream:  round3(float64(l.Upstream.PeakRSSBytes-prev.Upstream.PeakRSSBytes) * per1000),
			})
		}
		prev = l
	}
	return out
}

// PeerLoad is one load met by both controllers: each run in the order run,
// and the figures of each controller over its runs.
type PeerLoad struct {
	// Name is "admission-<N>" or "lifecycle-<N>".
	Name string `json:"name"`
	Mode string `json:"mode"`
	N    int    `json:"n"`
	// Limit is the API server alone taking the same creates and applies (of the
	// JobSets of Trainyard's last run), measured right after it; admission loads only.
	Limit     *Limit      `json:"limit,omitempty"`
	Runs      []PeerRun   `json:"runs"`
	Trainyard PeerFigures `json:"trainyard"`
	Upstream  PeerFigures `json:"upstream"`
}

// PeerRun is one controller meeting one load once, in its own namespace,
// deleted (and gone) before the next run starts.
type PeerRun struct {
	Controller string `json:"controller"`
	Round      int    `json:"round"`
	Namespace  string `json:"namespace"`
	// Idle is false when the controller still worked peerIdleLimit after the
	// last TrainJob arrived; its figures then end there.
	Idle   bool    `json:"idle"`
	Result *Result `json:"result"`
}

// PeerFigures is one controller's figures for one load: means over its runs,
// except the peaks, which are the highest. Rates are per second, times
// seconds, CPU seconds per 1,000 TrainJobs of the load, sizes bytes.
type PeerFigures struct {
	Runs int `json:"runs"`
	// Throughput is TrainJobs admitted (JobSet exists) per second from the first
	// create, or with lifecycle, finished per second.
	Throughput float64 `json:"throughput"`
	// LatencyP50/P99: created → JobSet exists, or with lifecycle → Complete.
	LatencyP50 float64 `json:"latencyP50"`
	LatencyP99 float64 `json:"latencyP99"`
	// RequestsPerTrainJob are the controller's API requests by verb (HTTP method).
	RequestsPerTrainJob map[string]float64 `json:"requestsPerTrainJob"`
	WritesPerTrainJob   float64            `json:"writesPerTrainJob"`
	// FailedSyncs are failed stage syncs (Trainyard) or reconciles (upstream).
	FailedSyncs float64 `json:"failedSyncs"`
	// Errors are failed creates and Failed TrainJobs.
	Errors             float64 `json:"errors"`
	ControllerCPU      float64 `json:"controllerCPUPer1000"`
	APIServerCPU       float64 `json:"apiserverCPUPer1000"`
	EtcdCPU            float64 `json:"etcdCPUPer1000"`
	ControlPlaneCPU    float64 `json:"controlPlaneCPUPer1000"`
	PeakRSSBytes       int64   `json:"peakRSSBytes"`
	PeakHeapBytes      int64   `json:"peakHeapInuseBytes"`
	MachineBusyCPU     float64 `json:"machineBusyCPUPer1000"`
	MachineUtilisation float64 `json:"machineUtilisation"`
	// Through Kueue (the Kueue load only): Kueue's unsuspend → the JobSet seen
	// unsuspended, seconds; the run's end-to-end seconds (first create → last
	// Complete); Kueue's own CPU per 1,000; and every client's successful writes to the
	// run's TrainJobs and JobSets per TrainJob, by client, then verb and resource (the
	// audit log).
	UnsuspendToJobSetUnsuspendedP50 float64                       `json:"unsuspendToJobSetUnsuspendedP50,omitempty"`
	UnsuspendToJobSetUnsuspendedP99 float64                       `json:"unsuspendToJobSetUnsuspendedP99,omitempty"`
	EndToEndSeconds                 float64                       `json:"endToEndSeconds,omitempty"`
	KueueCPU                        float64                       `json:"kueueCPUPer1000,omitempty"`
	WritesByClient                  map[string]map[string]float64 `json:"writesByClientPerTrainJob,omitempty"`
}

// peerFigures summarises the runs of controller name in runs.
func peerFigures(runs []PeerRun, name string) PeerFigures {
	var f PeerFigures
	f.RequestsPerTrainJob = map[string]float64{}
	for _, run := range runs {
		if run.Controller != name || run.Result == nil {
			continue
		}
		r := run.Result
		f.Runs++
		per1000 := 1000 / float64(max(r.N, 1))
		if l := r.Lifecycle; l != nil {
			if l.Seconds > 0 {
				f.Throughput += float64(l.Finished) / l.Seconds
			}
			f.LatencyP50 += l.LatencyP50
			f.LatencyP99 += l.LatencyP99
			f.Errors += float64(l.Failed)
		} else if a := r.Admission; a != nil {
			f.Throughput += a.TrainJobsPerSecond
			f.LatencyP50 += a.LatencyP50
			f.LatencyP99 += a.LatencyP99
		}
		if a := r.Admission; a != nil {
			f.Errors += float64(a.CreateErrors)
		}
		for verb, v := range r.Controller.Requests {
			f.RequestsPerTrainJob[verb] += v / float64(max(r.N, 1))
		}
		f.WritesPerTrainJob += r.Controller.WritesPerTrainJob
		f.FailedSyncs += sum(r.Controller.Errors)
		f.ControllerCPU += r.Controller.CPUSecondsPer1000
		f.APIServerCPU += r.Components[cluster.KubeAPIServer] * per1000
		f.EtcdCPU += r.Components[cluster.Etcd] * per1000
		f.MachineBusyCPU += r.Machine.BusyCPUSeconds * per1000
		f.MachineUtilisation += r.Machine.Utilisation
		f.PeakRSSBytes = max(f.PeakRSSBytes, r.Controller.PeakRSSBytes)
		f.PeakHeapBytes = max(f.PeakHeapBytes, r.Controller.PeakHeapBytes)
		if kq := r.Kueue; kq != nil {
			f.UnsuspendToJobSetUnsuspendedP50 += kq.UnsuspendToJobSetUnsuspended.P50
			f.UnsuspendToJobSetUnsuspendedP99 += kq.UnsuspendToJobSetUnsuspended.P99
			f.EndToEndSeconds += kq.Seconds
			f.KueueCPU += r.Components[cluster.Kueue] * per1000
			if f.WritesByClient == nil {
				f.WritesByClient = map[string]map[string]float64{}
			}
			for client, byWhat := range kq.WritesPerTrainJob {
				if f.WritesByClient[client] == nil {
					f.WritesByClient[client] = map[string]float64{}
				}
				for what, v := range byWhat {
					f.WritesByClient[client][what] += v
				}
			}
		}
	}
	if f.Runs == 0 {
		return f
	}
	k := float64(f.Runs)
	for _, p := range []*float64{&f.Throughput, &f.LatencyP50, &f.LatencyP99, &f.WritesPerTrainJob, &f.FailedSyncs, &f.Errors,
		&f.ControllerCPU, &f.APIServerCPU, &f.EtcdCPU, &f.MachineBusyCPU, &f.MachineUtilisation,
		&f.UnsuspendToJobSetUnsuspendedP50, &f.UnsuspendToJobSetUnsuspendedP99, &f.EndToEndSeconds, &f.KueueCPU} {
		*p = round3(*p / k)
	}
	for verb, v := range f.RequestsPerTrainJob {
		f.RequestsPerTrainJob[verb] = round3(v / k)
	}
	for _, byWhat := range f.WritesByClient {
		for what, v := range byWhat {
			byWhat[what] = round3(v / k)
		}
	}
	f.ControlPlaneCPU = round3(f.APIServerCPU + f.EtcdCPU)
	return f
}

// peerRatios computes Trainyard ÷ upstream for every load's figures, keyed
// "<figure>_<N>" for admission loads (admission_throughput_2000,
// admission_p99_2000, controller_cpu_per_1000_2000, peak_rss_10000, ...) and
// "lifecycle_<figure>" for the lifecycle load, plus controller_cpu_per_1000
// and control_plane_cpu_per_1000 over every admission run of either
// controller together (CPU seconds per 1,000 TrainJobs admitted). A figure
// that is 0 for upstream gets no ratio.
func peerRatios(loads []PeerLoad) map[string]float64 {
	out := map[string]float64{}
	put := func(key string, ty, up float64) {
		if up != 0 {
			out[key] = round3(ty / up)
		}
	}
	var cpu, plane [2]float64 // CPU seconds per TrainJob, summed over admission runs: trainyard, upstream
	var admitted [2]float64
	for _, l := range loads {
		ty, up := l.Trainyard, l.Upstream
		if l.Mode == ModeKueue {
			put("kueue_writes_per_trainjob", ty.WritesPerTrainJob, up.WritesPerTrainJob)
			put("kueue_throughput", ty.Throughput, up.Throughput)
			put("kueue_end_to_end_seconds", ty.EndToEndSeconds, up.EndToEndSeconds)
			put("kueue_p50", ty.LatencyP50, up.LatencyP50)
			put("kueue_p99", ty.LatencyP99, up.LatencyP99)
			put("kueue_unsuspend_to_jobset_unsuspended_p50", ty.UnsuspendToJobSetUnsuspendedP50, up.UnsuspendToJobSetUnsuspendedP50)
			put("kueue_unsuspend_to_jobset_unsuspended_p99", ty.UnsuspendToJobSetUnsuspendedP99, up.UnsuspendToJobSetUnsuspendedP99)
			put("kueue_controller_cpu_per_1000", ty.ControllerCPU, up.ControllerCPU)
			put("kueue_apiserver_cpu_per_1000", ty.APIServerCPU, up.APIServerCPU)
			put("kueue_etcd_cpu_per_1000", ty.EtcdCPU, up.EtcdCPU)
			put("kueue_control_plane_cpu_per_1000", ty.ControlPlaneCPU, up.ControlPlaneCPU)
			put("kueue_kueue_cpu_per_1000", ty.KueueCPU, up.KueueCPU)
			put("kueue_peak_rss", float64(ty.PeakRSSBytes), float64(up.PeakRSSBytes))
			continue
		}
		if l.Mode == ModeLifecycle {
			put("lifecycle_throughput", ty.Throughput, up.Throughput)
			put("lifecycle_p50", ty.LatencyP50, up.LatencyP50)
			put("lifecycle_p99", ty.LatencyP99, up.LatencyP99)
			put("lifecycle_writes_per_trainjob", ty.WritesPerTrainJob, up.WritesPerTrainJob)
			put("lifecycle_controller_cpu_per_1000", ty.ControllerCPU, up.ControllerCPU)
			put("lifecycle_control_plane_cpu_per_1000", ty.ControlPlaneCPU, up.ControlPlaneCPU)
			put("lifecycle_apiserver_cpu_per_1000", ty.APIServerCPU, up.APIServerCPU)
			put("lifecycle_etcd_cpu_per_1000", ty.EtcdCPU, up.EtcdCPU)
			put("lifecycle_peak_rss", float64(ty.PeakRSSBytes), float64(up.PeakRSSBytes))
			put("lifecycle_peak_heap", float64(ty.PeakHeapBytes), float64(up.PeakHeapBytes))
			continue
		}
		n := fmt.Sprint(l.N)
		put("admission_throughput_"+n, ty.Throughput, up.Throughput)
		put("admission_p50_"+n, ty.LatencyP50, up.LatencyP50)
		put("admission_p99_"+n, ty.LatencyP99, up.LatencyP99)
		put("writes_per_trainjob_"+n, ty.WritesPerTrainJob, up.WritesPerTrainJob)
		put("controller_cpu_per_1000_"+n, ty.ControllerCPU, up.ControllerCPU)
		put("apiserver_cpu_per_1000_"+n, ty.APIServerCPU, up.APIServerCPU)
		put("etcd_cpu_per_1000_"+n, ty.EtcdCPU, up.EtcdCPU)
		put("control_plane_cpu_per_1000_"+n, ty.ControlPlaneCPU, up.ControlPlaneCPU)
		put("peak_rss_"+n, float64(ty.PeakRSSBytes), float64(up.PeakRSSBytes))
		put("peak_heap_"+n, float64(ty.PeakHeapBytes), float64(up.PeakHeapBytes))
		for i, f := range []PeerFigures{ty, up} {
			k := float64(f.Runs * l.N)
			cpu[i] += f.ControllerCPU / 1000 * k
			plane[i] += f.ControlPlaneCPU / 1000 * k
			admitted[i] += k
		}
	}
	if admitted[0] > 0 && admitted[1] > 0 {
		put("controller_cpu_per_1000", cpu[0]/admitted[0], cpu[1]/admitted[1])
		put("control_plane_cpu_per_1000", plane[0]/admitted[0], plane[1]/admitted[1])
	}
	return out
}

// Issue 17's targets that peer mode measures.
const (
	targetPeerThroughput      = 3.5  // × upstream
	targetPeerLimitRatio      = 0.95 // × the API server's SSA limit
	targetPeerP99             = 0.25 // × upstream, at 2,000
	targetPeerControlPlane    = 0.7  // × upstream
	targetPeerCPUPer1000      = 0.8  // s
	targetPeerCPURatio        = 0.2  // × upstream
	targetPeerRSSBytes        = 110 << 20
	targetPeerRSSAtN          = 10000
	targetPeerP99AtN          = 2000
	targetPeerLifecycleWrites = 3.0
	// Issue 27's targets through Kueue: the controller's writes per TrainJob.
	targetPeerKueueWrites      = 5.0
	targetPeerKueueWritesRatio = 0.6 // × upstream
)

// evaluatePeerTargets states issue 17's targets against r's loads and ratios.
func evaluatePeerTargets(r *PeerResult) []Target {
	var ts []Target
	add := func(name, target, measured string, met bool, note string) {
		ts = append(ts, Target{Name: name, Target: target, Measured: measured, Met: met, Note: note})
	}
	for _, l := range r.Loads {
		ty, up := l.Trainyard, l.Upstream
		n := fmt.Sprint(l.N)
		if l.Mode == ModeKueue {
			w := r.Ratios["kueue_writes_per_trainjob"]
			add("writes per TrainJob through Kueue, N = "+n, fmt.Sprintf("≤ %.0f and ≤ %.1f× upstream", targetPeerKueueWrites, targetPeerKueueWritesRatio),
				fmt.Sprintf("%.2f vs %.2f: %.2f×", ty.WritesPerTrainJob, up.WritesPerTrainJob, w),
				ty.WritesPerTrainJob <= targetPeerKueueWrites && w <= targetPeerKueueWritesRatio,
				"the controller's own writes (its client's requests); Kueue's, JobSet's and the bench's are under \"Who writes\"")
			continue
		}
		if l.Mode == ModeLifecycle {
			add("lifecycle writes per TrainJob to Complete", fmt.Sprintf("≤ %.0f", targetPeerLifecycleWrites),
				fmt.Sprintf("%.2f (upstream %.2f)", ty.WritesPerTrainJob, up.WritesPerTrainJob), ty.WritesPerTrainJob <= targetPeerLifecycleWrites, "")
			continue
		}
		ratio := r.Ratios["admission_throughput_"+n]
		add("admission throughput, N = "+n, fmt.Sprintf("≥ %.1f× upstream", targetPeerThroughput),
			fmt.Sprintf("%.0f/s vs %.0f/s: %.2f×", ty.Throughput, up.Throughput, ratio), ratio >= targetPeerThroughput, "")
		if l.Limit != nil && l.Limit.TrainJobsPerSecondWithApply > 0 {
			lr := ty.Throughput / l.Limit.TrainJobsPerSecondWithApply
			add("admission throughput vs the SSA limit, N = "+n, fmt.Sprintf("≥ %.2f× limit", targetPeerLimitRatio),
				fmt.Sprintf("%.0f/s vs %.0f/s: %.2f×", ty.Throughput, l.Limit.TrainJobsPerSecondWithApply, lr), lr >= targetPeerLimitRatio,
				"limit = N / (raw TrainJob creates + raw JobSet server-side applies), measured after Trainyard's last run of the load")
		}
		if l.N == targetPeerP99AtN {
			p := r.Ratios["admission_p99_"+n]
			add("admission p99, N = "+n, fmt.Sprintf("≤ %.2f× upstream", targetPeerP99),
				fmt.Sprintf("%.2f s vs %.2f s: %.2f×", ty.LatencyP99, up.LatencyP99, p), p <= targetPeerP99, "")
		}
		cp := r.Ratios["control_plane_cpu_per_1000_"+n]
		add("control-plane CPU per 1,000, N = "+n, fmt.Sprintf("≤ %.1f× upstream", targetPeerControlPlane),
			fmt.Sprintf("%.2f s vs %.2f s: %.2f×", ty.ControlPlaneCPU, up.ControlPlaneCPU, cp), cp <= targetPeerControlPlane, "kube-apiserver + etcd")
		c := r.Ratios["controller_cpu_per_1000_"+n]
		add("controller CPU per 1,000, N = "+n, fmt.Sprintf("≤ %.1f s and ≤ %.1f× upstream", targetPeerCPUPer1000, targetPeerCPURatio),
			fmt.Sprintf("%.2f s vs %.2f s: %.2f×", ty.ControllerCPU, up.ControllerCPU, c), ty.ControllerCPU <= targetPeerCPUPer1000 && c <= targetPeerCPURatio, "")
		if l.N == targetPeerRSSAtN {
			add("peak RSS, N = "+n, fmt.Sprintf("≤ %d MiB", targetPeerRSSBytes>>20),
				fmt.Sprintf("%s (upstream %s)", mib(ty.PeakRSSBytes), mib(up.PeakRSSBytes)), ty.PeakRSSBytes <= targetPeerRSSBytes, "")
		}
	}
	return ts
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
