package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Result is one run's figures; result.json is this struct. Times are
// seconds, sizes bytes, rates per second.
type Result struct {
	Mode            string    `json:"mode"`
	N               int       `json:"n"`
	Parallelism     int       `json:"parallelism"`
	NumNodes        int32     `json:"numNodes"`
	ControllerQPS   float32   `json:"controllerQPS"`
	ControllerBurst int32     `json:"controllerBurst"`
	ControllerArgs  []string  `json:"controllerArgs,omitempty"`
	ControllerEnv   []string  `json:"controllerEnv,omitempty"`
	StartedAt       time.Time `json:"startedAt"`
	CPUs            int       `json:"cpus"`
	GoVersion       string    `json:"goVersion"`

	// Admission: TrainJob created → its JobSet exists (both modes).
	Admission *Admission `json:"admission,omitempty"`
	// Lifecycle: TrainJob created → Complete (lifecycle mode only).
	Lifecycle *Lifecycle `json:"lifecycle,omitempty"`
	// Limit: the API server alone, no controller (admission mode only).
	Limit *Limit `json:"limit,omitempty"`
	// Restart: the controller started again with every TrainJob and JobSet present
	// (admission mode with --restart, issue 17).
	Restart *Restart `json:"restart,omitempty"`
	// Progress: the reporting window and the admission bursts (progress mode only).
	// Controller, Stages, Components and Machine then cover the reporting window.
	Progress *Progress `json:"progress,omitempty"`
	// Kueue: the TrainJobs through Kueue (kueue mode only); Admission and Lifecycle
	// are then of the same run, the JobSets they count created suspended.
	Kueue *Kueue `json:"kueue,omitempty"`
	// TTL: the TTLs of N finished TrainJobs (ttl mode only); Controller, Stages,
	// Components and Machine then cover the deletions.
	TTL *TTL `json:"ttl,omitempty"`

	Controller Controller `json:"controller"`
	Stages     []Stage    `json:"stages"`
	// Components is the CPU seconds each process used between the burst's
	// start and the controller going idle (trainyard, etcd, kube-apiserver, ...).
	Components map[string]float64 `json:"componentCPUSeconds"`
	Machine    Machine            `json:"machine"`

	Targets []Target `json:"targets"`
}

// Admission figures. Latency is per TrainJob: its create call returned → the
// benchmark's watch saw its JobSet.
type Admission struct {
	CreateSeconds            float64 `json:"createSeconds"`
	TrainJobCreatesPerSecond float64 `json:"trainJobCreatesPerSecond"`
	CreateErrors             int     `json:"createErrors"`
	FirstCreateError         string  `json:"firstCreateError,omitempty"`
	Admitted                 int     `json:"admitted"`
	// Seconds runs from the first create sent to the last JobSet seen.
	Seconds            float64 `json:"seconds"`
	TrainJobsPerSecond float64 `json:"trainJobsPerSecond"`
	LatencyP50         float64 `json:"latencyP50"`
	LatencyP99         float64 `json:"latencyP99"`
	LatencyMax         float64 `json:"latencyMax"`
	// Reviews are the controller's admission reviews of the burst's TrainJobs, when
	// the run had webhooks on.
	Reviews *Reviews `json:"reviews,omitempty"`
}

// Reviews are admission reviews (validate + mutate) of TrainJobs: how many, and the
// time the webhook took for each, in seconds.
type Reviews struct {
	Count      int     `json:"count"`
	P50Seconds float64 `json:"p50Seconds"`
	P99Seconds float64 `json:"p99Seconds"`
}

// Lifecycle figures: create returned → Complete (or Failed) seen.
type Lifecycle struct {
	Seconds    float64 `json:"seconds"`
	Finished   int     `json:"finished"`
	Failed     int     `json:"failed"`
	LatencyP50 float64 `json:"latencyP50"`
	LatencyP99 float64 `json:"latencyP99"`
}

// Limit is the physical limit: the API server taking the same creates with
// no controller. TrainJobsPerSecond = N / (TrainJob creates + JobSet creates):
// the best admission rate an API server that must store both can sustain.
type Limit struct {
	TrainJobCreateSeconds    float64 `json:"trainJobCreateSeconds"`
	TrainJobCreatesPerSecond float64 `json:"trainJobCreatesPerSecond"`
	TrainJobCreateErrors     int     `json:"trainJobCreateErrors"`
	JobSetCreateSeconds      float64 `json:"jobSetCreateSeconds"`
	JobSetCreatesPerSecond   float64 `json:"jobSetCreatesPerSecond"`
	JobSetCreateErrors       int     `json:"jobSetCreateErrors"`
	// The same JobSets created with server-side apply, as the controller does.
	JobSetApplySeconds     float64 `json:"jobSetApplySeconds"`
	JobSetAppliesPerSecond float64 `json:"jobSetAppliesPerSecond"`
	JobSetApplyErrors      int     `json:"jobSetApplyErrors"`
	TrainJobsPerSecond     float64 `json:"trainJobsPerSecond"`
	// TrainJobsPerSecondWithApply = N / (TrainJob creates + JobSet applies).
	TrainJobsPerSecondWithApply float64 `json:"trainJobsPerSecondWithApply"`
}

// Controller figures, from its /metrics and /proc.
type Controller struct {
	CPUSeconds        float64 `json:"cpuSeconds"`
	CPUSecondsPer1000 float64 `json:"cpuSecondsPer1000TrainJobs"`
	// PeakRSSBytes is the process's VmHWM: the peak over its whole life.
	PeakRSSBytes int64 `json:"peakRSSBytes"`
	// HeapBytes is go_memstats_heap_inuse_bytes at the end of the run; PeakHeapBytes
	// the highest value scraped (every second) during it.
	HeapBytes     int64 `json:"heapInuseBytes"`
	PeakHeapBytes int64 `json:"peakHeapInuseBytes"`
	// Requests counts API requests by HTTP method during the run.
	Requests          map[string]float64 `json:"requests"`
	Writes            float64            `json:"writes"`
	WritesPerTrainJob float64            `json:"writesPerTrainJob"`
	// Errors counts failed syncs by "stage/reason"; Retries rate-limited
	// requeues by stage; CacheLagErrors the not_found and conflict errors.
	Errors         map[string]float64 `json:"errors"`
	Retries        map[string]float64 `json:"retries"`
	CacheLagErrors float64            `json:"cacheLagErrors"`
}

// Stage is one pipeline stage's queue wait and sync time percentiles
// (seconds), estimated from the controller's histograms.
type Stage struct {
	Name     string  `json:"name"`
	Syncs    float64 `json:"syncs"`
	QueueP50 float64 `json:"queueP50"`
	QueueP99 float64 `json:"queueP99"`
	SyncP50  float64 `json:"syncP50"`
	SyncP99  float64 `json:"syncP99"`
}

// Machine is how busy the whole machine was during the run.
type Machine struct {
	WallSeconds    float64 `json:"wallSeconds"`
	BusyCPUSeconds float64 `json:"busyCPUSeconds"`
	// Utilisation is busy CPU / (wall × cores): near 1 means CPU-bound.
	Utilisation float64 `json:"utilisation"`
}

// Target is one of issue 9's targets against this run.
type Target struct {
	Name     string `json:"name"`
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
	Note     string `json:"note,omitempty"`
}

// ReadResult reads a result.json.
func ReadResult(path string) (*Result, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r := &Result{}
	if err := json.Unmarshal(data, r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// WriteOutputs (re)writes result.json and report.md of r into dir; plot.svg
// needs the run's timeline and is written by Run.
func WriteOutputs(dir string, r *Result) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "result.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(Report(r)), 0o644)
}

func writeOutputs(dir string, r *Result, tl *timeline) error {
	if err := WriteOutputs(dir, r); err != nil {
		return err
	}
	return writePlot(filepath.Join(dir, "plot.svg"), r, tl)
}
