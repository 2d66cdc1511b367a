package mlpolicy

import (
	"crypto/ecdh"
	"encoding/base64"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
)

// z85Decode is the inverse of z85, for the tests.
func z85Decode(t *testing.T, s string) []byte {
	t.Helper()
	if len(s)%5 != 0 {
		t.Fatalf("z85 %q: length not a multiple of 5", s)
	}
	var out []byte
	for i := 0; i < len(s); i += 5 {
		var v uint32
		for j := range 5 {
			d := strings.IndexByte(z85Alphabet, s[i+j])
			if d < 0 {
				t.Fatalf("z85 %q: bad character %q", s, s[i+j])
			}
			v = v*85 + uint32(d)
		}
		out = append(out, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	return out
}

// The test vector of ZeroMQ RFC 32.
func TestZ85(t *testing.T) {
	if got := z85([]byte{0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B}); got != "HelloWorld" {
		t.Errorf("z85 = %q, want HelloWorld", got)
	}
}

// fluxPlanObjects returns the scripts ConfigMap's data and the generated CURVE
// certificate, checking both objects' identity.
func fluxPlanObjects(t *testing.T, p *plan.Plan, name string) (scripts map[string]string, cert string) {
	t.Helper()
	if len(p.Objects) != 1 || len(p.CreateOnly) != 1 {
		t.Fatalf("plan objects %d, create-only %d; want the scripts ConfigMap and the CURVE Secret", len(p.Objects), len(p.CreateOnly))
	}
	checkOwnedObject(t, p.Objects[0], "v1", "ConfigMap", name+"-flux-entrypoint")
	scripts, _, _ = unstructured.NestedStringMap(p.Objects[0].Object, "data")
	o := p.CreateOnly[0]
	checkOwnedObject(t, o.Object, "v1", "Secret", name+"-flux-curve"+testSecretSuffix)
	if got := o.Object.Object["type"]; got != "Opaque" {
		t.Errorf("Secret type = %v, want Opaque", got)
	}
	secret := o.Object.DeepCopy()
	if err := o.Generate(secret); err != nil {
		t.Fatal(err)
	}
	data, _, _ := unstructured.NestedStringMap(secret.Object, "data")
	raw, err := base64.StdEncoding.DecodeString(data["curve.cert"])
	if err != nil || len(data) != 1 {
		t.Fatalf("Secret data %v: want one base64 key curve.cert (%v)", data, err)
	}
	return scripts, string(raw)
}

// checkCurveCert checks a ZPL CURVE certificate: named name, with a Z85 key pair whose
// public key is the secret key's.
func checkCurveCert(t *testing.T, cert, name string) {
	t.Helper()
	field := func(key string) string {
		m := regexp.MustCompile(`(?m)^    ` + key + ` = "([^"]*)"$`).FindStringSubmatch(cert)
		if m == nil {
			t.Fatalf("certificate has no %s:\n%s", key, cert)
		}
		return m[1]
	}
	if got := field("name"); got != name {
		t.Errorf("certificate name = %q, want %q", got, name)
	}
	if !strings.Contains(cert, "\nmetadata\n") || !strings.Contains(cert, "\ncurve\n") {
		t.Errorf("certificate lacks the metadata and curve sections:\n%s", cert)
	}
	pub, sec := field("public-key"), field("secret-key")
	if len(pub) != 40 || len(sec) != 40 {
		t.Fatalf("keys %q, %q: want 40 Z85 characters each", pub, sec)
	}
	key, err := ecdh.X25519().NewPrivateKey(z85Decode(t, sec))
	if err != nil {
		t.Fatal(err)
	}
	if z85(key.PublicKey().Bytes()) != pub {
		t.Error("public-key is not the secret key's")
	}
}

// The upstream Flux example (docs/compatibility.md#flux): runtime flux-distributed and
// the lammps TrainJobs.
func TestFluxUpstreamExamples(t *testing.T) {
	rt := plantest.UpstreamRuntimeFile(t, "examples/flux/flux-runtime.yaml")
	cases := map[string]struct {
		file         string
		wantFlags    string
		wantResource string
	}{
		"one GPU per node": {file: "examples/flux/lammps-train-gpus.yaml", wantFlags: "-N 2 -n 2 -g 1", wantResource: "--cores=0 --gpu=0"},
		"4 tasks per node": {file: "examples/flux/lammps-train-job.yaml", wantFlags: "-N 2 -n 8", wantResource: "--cores=0-3"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tj := plantest.UpstreamTrainJob(t, tc.file)
			p := mustBuildPlan(t, tj, rt)
			js := p.JobSet
			n := tj.Name

			c := containerOf(t, js, "node")
			wantCommand := []string{"/bin/bash", "/etc/flux-config/entrypoint.sh", strings.Join(tj.Spec.Trainer.Command, " ")}
			if diff := cmp.Diff(wantCommand, c.Command); diff != "" {
				t.Errorf("node command (-want +got):\n%s", diff)
			}
			if c.Args != nil || c.Image != *tj.Spec.Trainer.Image {
				t.Errorf("node args %v, image %q: want none and the TrainJob's", c.Args, c.Image)
			}
			wantMounts := []corev1.VolumeMount{
				{Name: "flux-install", MountPath: "/mnt/flux"},
				{Name: "spack-install", MountPath: "/opt/software"},
				{Name: n + "-flux-entrypoint", MountPath: "/etc/flux-config", ReadOnly: true},
				{Name: "flux-curve", MountPath: "/curve", ReadOnly: true},
				{Name: "shared-memory", MountPath: "/dev/shm", ReadOnly: true},
			}
			if diff := cmp.Diff(wantMounts, c.VolumeMounts); diff != "" {
				t.Errorf("node mounts (-want +got):\n%s", diff)
			}
			pod := podOf(t, js, "node")
			wantVolumes := []corev1.Volume{
				{Name: "spack-install", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "flux-install", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: n + "-flux-entrypoint", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: n + "-flux-entrypoint"}, DefaultMode: ptr.To[int32](0o755)}}},
				{Name: "shared-memory", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
				{Name: "flux-curve", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
					SecretName: n + "-flux-curve" + testSecretSuffix, DefaultMode: ptr.To[int32](0o400)}}},
			}
			if diff := cmp.Diff(wantVolumes, pod.Volumes); diff != "" {
				t.Errorf("node volumes (-want +got):\n%s", diff)
			}
			wantInit := []corev1.Container{{
				Name: "flux-installer", Image: "ghcr.io/converged-computing/flux-view-ubuntu:tag-jammy",
				Command:      []string{"/bin/bash", "/etc/flux-config/init.sh"},
				VolumeMounts: []corev1.VolumeMount{wantMounts[0], wantMounts[2]},
			}}
			if diff := cmp.Diff(wantInit, pod.InitContainers); diff != "" {
				t.Errorf("init containers (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(map[string]int32{"node": 2}, counts(t, js)); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}

			scripts, cert := fluxPlanObjects(t, p, n)
			checkCurveCert(t, cert, n)
			entry := scripts["entrypoint.sh"]
			for _, want := range []string{
				`flux R encode --hosts="` + n + `-node-0-[0-1]" ` + tc.wantResource + ` > "$config/R"`,
				`curve_cert = "/curve/curve.cert"`,
				`default_port = 8050`,
				`default_bind = "tcp://eth0:%p"`,
				`default_connect = "tcp://%h.` + n + `.default.svc.cluster.local:%p"`,
				`hosts = [{ host = "` + n + `-node-0-[0-1]" }]`,
				`queue-policy = "fcfs"`,
				`if [ "$(hostname)" = "` + n + `-node-0-0" ]; then`,
				`flux run ` + tc.wantFlags + ` $command "$@"`,
			} {
				if !strings.Contains(entry, want) {
					t.Errorf("entrypoint.sh lacks %q:\n%s", want, entry)
				}
			}
			if init := scripts["init.sh"]; !strings.HasPrefix(init, "#!/bin/bash\n") || !strings.Contains(init, "/mnt/flux") {
				t.Errorf("init.sh does not install into /mnt/flux:\n%s", init)
			}
		})
	}
}

func fluxRuntime() plan.Runtime {
	rt := plantest.SkeletonRuntime(&trainer.MLPolicy{NumNodes: ptr.To[int32](3),
		MLPolicySource: trainer.MLPolicySource{Flux: &trainer.FluxMLPolicySource{NumProcPerNode: ptr.To[int32](2)}}})
	c := &rt.Spec.Template.Spec.ReplicatedJobs[2].Template.Spec.Template.Spec.Containers[0]
	c.Command, c.Args = []string{"python", "train.py"}, []string{"--runtime"}
	c.Env = []corev1.EnvVar{env("FLUX_NETWORK_DEVICE", "ib0"), env("FLUX_QUEUE_POLICY", "easy"), env("FLUX_VIEW_IMAGE", "view:runtime")}
	return rt
}

// Defaults from the runtime, settings from env (the TrainJob's over the runtime's), and
// where the TrainJob's args go.
func TestFluxSettings(t *testing.T) {
	cases := map[string]struct {
		trainer      *trainer.Trainer
		wantCommand  string
		wantArgs     []string
		wantInEntry  []string
		wantInitFrom string
	}{
		"no spec.trainer: the runtime's count, tasks, command and settings": {
			wantCommand: "python train.py", wantArgs: []string{"--runtime"},
			wantInEntry:  []string{`hosts = [{ host = "test-job-node-0-[0-2]" }]`, "flux run -N 3 -n 6 $command", "--cores=0-1", `tcp://ib0:%p`, `queue-policy = "easy"`},
			wantInitFrom: "view:runtime",
		},
		"TrainJob args join the command, the runtime's stay args; TrainJob env wins": {
			trainer: &trainer.Trainer{NumNodes: ptr.To[int32](1), Args: []string{"--epochs", "3"},
				Env: []corev1.EnvVar{env("FLUX_QUEUE_POLICY", "fcfs"), env("FLUX_VIEW_IMAGE", "view:trainjob")}},
			wantCommand: "python train.py --epochs 3", wantArgs: []string{"--runtime"},
			wantInEntry:  []string{`hosts = [{ host = "test-job-node-0-[0]" }]`, "flux run -N 1 -n 2 $command", `queue-policy = "fcfs"`},
			wantInitFrom: "view:trainjob",
		},
		"TrainJob command": {
			trainer:     &trainer.Trainer{Command: []string{"lmp", "-in", "in.lj"}, NumProcPerNode: ptr.To[int32](1)},
			wantCommand: "lmp -in in.lj", wantArgs: []string{"--runtime"},
			wantInEntry: []string{"flux run -N 3 -n 3 $command", "--cores=0 "},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rt := fluxRuntime()
			p := mustBuildPlan(t, plantest.TrainJob(rt.Name, tc.trainer), rt)
			c := containerOf(t, p.JobSet, "node")
			if diff := cmp.Diff([]string{"/bin/bash", "/etc/flux-config/entrypoint.sh", tc.wantCommand}, c.Command); diff != "" {
				t.Errorf("command (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantArgs, c.Args); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
			scripts, _ := fluxPlanObjects(t, p, "test-job")
			for _, want := range tc.wantInEntry {
				if !strings.Contains(scripts["entrypoint.sh"], want) {
					t.Errorf("entrypoint.sh lacks %q:\n%s", want, scripts["entrypoint.sh"])
				}
			}
			if tc.wantInitFrom != "" {
				if got := podOf(t, p.JobSet, "node").InitContainers[0].Image; got != tc.wantInitFrom {
					t.Errorf("flux-installer image = %q, want %q", got, tc.wantInitFrom)
				}
			}
		})
	}
}

// A rebuild plans the same objects; each creation gets a fresh certificate.
func TestFluxRebuildIsStable(t *testing.T) {
	rt := fluxRuntime()
	tj := plantest.TrainJob(rt.Name, &trainer.Trainer{NumNodes: ptr.To[int32](2)})
	first, second := mustBuildPlan(t, tj, rt), mustBuildPlan(t, tj, rt)
	if diff := cmp.Diff(first.Objects, second.Objects); diff != "" {
		t.Errorf("objects differ between builds (-first +second):\n%s", diff)
	}
	if diff := cmp.Diff(first.JobSet, second.JobSet); diff != "" {
		t.Errorf("JobSet differs between builds (-first +second):\n%s", diff)
	}
	_, a := fluxPlanObjects(t, first, "test-job")
	_, b := fluxPlanObjects(t, first, "test-job")
	if a == b {
		t.Error("two creations generated the same certificate")
	}
}

func TestFluxInvalidInput(t *testing.T) {
	cases := map[string]struct {
		mutate    func(*plan.Runtime)
		wantField string
	}{
		"reserved init container": {
			mutate: func(rt *plan.Runtime) {
				pod := &rt.Spec.Template.Spec.ReplicatedJobs[2].Template.Spec.Template.Spec
				pod.InitContainers = []corev1.Container{{Name: "flux-installer", Image: "mine"}}
			},
			wantField: "spec.template.spec.replicatedJobs[name=node].template.spec.template.spec.initContainers[name=flux-installer]",
		},
		"no node replicatedJob": {
			mutate:    func(rt *plan.Runtime) { rt.Spec.Template.Spec.ReplicatedJobs[2].Name = "trainer" },
			wantField: "spec.template.spec.replicatedJobs",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rt := fluxRuntime()
			tc.mutate(&rt)
			p, err := buildPlan(t, plantest.TrainJob(rt.Name, nil), rt)
			var invalid *plan.InvalidInputError
			if !errors.As(err, &invalid) || invalid.Object != "TrainingRuntime/test-runtime" || invalid.Field != tc.wantField {
				t.Fatalf("Apply() = %#v, want *plan.InvalidInputError for the runtime at %s", err, tc.wantField)
			}
			if len(p.Objects) != 0 || len(p.CreateOnly) != 0 {
				t.Errorf("planned %d objects and %d create-only objects; want none", len(p.Objects), len(p.CreateOnly))
			}
		})
	}
}
