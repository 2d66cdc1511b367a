package mlpolicy

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"text/template"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
)

// Names, paths and defaults of Flux (docs/compatibility.md#objects-per-trainjob,
// docs/compatibility.md#flux).
const (
	// fluxEntrypointSuffix names the scripts ConfigMap, and its volume:
	// "<trainjob>-flux-entrypoint".
	fluxEntrypointSuffix = "-flux-entrypoint"
	// fluxCurvePurpose names the CURVE certificate Secret:
	// "<trainjob>-flux-curve-<suffix>" (SecretNames).
	fluxCurvePurpose = "flux-curve"

	fluxInstaller      = "flux-installer"
	fluxInstallVolume  = "flux-install"
	fluxSpackVolume    = "spack-install"
	fluxCurveVolume    = "flux-curve"
	fluxSharedMemory   = "shared-memory"
	fluxInstallDir     = "/mnt/flux"
	fluxSoftwareDir    = "/opt/software"
	fluxConfigDir      = "/etc/flux-config"
	fluxCurveDir       = "/curve"
	fluxEntrypointKey  = "entrypoint.sh"
	fluxInitKey        = "init.sh"
	fluxCurveKey       = "curve.cert"
	fluxBrokerPort     = 8050
	envFluxViewImage   = "FLUX_VIEW_IMAGE"
	envFluxNetworkDev  = "FLUX_NETWORK_DEVICE"
	envFluxQueuePolicy = "FLUX_QUEUE_POLICY"
)

// fluxDefaults are the settings a runtime or TrainJob may override through env vars of
// the same name on the "node" container.
var fluxDefaults = map[string]string{
	envFluxViewImage:   "ghcr.io/converged-computing/flux-view-ubuntu:tag-jammy",
	envFluxNetworkDev:  "eth0",
	envFluxQueuePolicy: "fcfs",
}

type flux struct{ names SecretNames }

// Flux returns the mlPolicy.flux plugin (docs/compatibility.md#flux): every pod of the
// replicatedJob "node" runs a Flux broker, and the lead broker (pod 0) runs the
// trainer's command as one Flux job over all nodes.
//
// The "node" container's command becomes
// ["/bin/bash", "/etc/flux-config/entrypoint.sh", "<command and spec.trainer.args>"];
// an init container "flux-installer" (image FLUX_VIEW_IMAGE) copies Flux into a shared
// volume. Side objects: the ConfigMap <trainjob>-flux-entrypoint (keys entrypoint.sh
// and init.sh, generated per TrainJob) and the Secret <trainjob>-flux-curve-<suffix>
// (SecretNames; upstream's is <trainjob>-flux-curve; key curve.cert, the ZeroMQ CURVE
// certificate the brokers share).
//
// Deliberate differences from upstream (docs/compatibility.md): the certificate's key
// is random, generated once when the Secret is created (a plan.CreateOnlyObject, like
// the MPI SSH key); upstream derives it from the TrainJob's UID, which anyone who can
// read the TrainJob knows. spec.trainer.numNodes defaults to the "node" replicatedJob's
// count instead of being required (upstream dereferences it,
// docs/compatibility.md#upstream-quirks (quirk 11)). The scripts are Trainyard's own;
// they expect the flux-view image layout (Flux in /opt/view, its dependencies in
// /opt/software).
func Flux(names SecretNames) Plugin { return flux{names: names} }

func (flux) Name() string { return "Flux" }

func (flux) Enabled(p *trainer.MLPolicy) bool { return p != nil && p.Flux != nil }

// fluxParams are what the scripts are generated from.
type fluxParams struct {
	Name, Namespace, Subdomain string
	NumNodes, Tasks, GPUs      int64
	NetworkDevice, QueuePolicy string
	Port                       int
}

// LeadHost is pod 0's hostname: its broker has rank 0 and runs the job.
func (f fluxParams) LeadHost() string { return f.Name + "-node-0-0" }

// Hostlist is every pod's hostname in Flux's hostlist syntax, in rank order.
func (f fluxParams) Hostlist() string { return f.Name + "-node-0-[" + idRange(f.NumNodes) + "]" }

// SubmitFlags are the flux submit sizing flags: nodes, tasks and GPUs per task.
func (f fluxParams) SubmitFlags() string {
	flags := fmt.Sprintf("-N %d -n %d", f.NumNodes, f.Tasks*f.NumNodes)
	if f.GPUs > 0 {
		flags += fmt.Sprintf(" -g %d", f.GPUs)
	}
	return flags
}

// ResourceFlags describe one node's cores and GPUs to flux R encode.
func (f fluxParams) ResourceFlags() string {
	flags := "--cores=" + idRange(f.Tasks)
	if f.GPUs > 0 {
		flags += " --gpu=" + idRange(f.GPUs)
	}
	return flags
}

// idRange is Flux's idset of n ids from 0: "0", or "0-<n-1>".
func idRange(n int64) string {
	if n <= 1 {
		return "0"
	}
	return "0-" + strconv.FormatInt(n-1, 10)
}

// ValidateRuntime implements Plugin: the runtime must have the replicatedJob "node"
// with a "node" container (Invalid at spec.template.spec.replicatedJobs), and that
// replicatedJob must not declare the init container "flux-installer" the plugin adds
// (Invalid at spec.template.spec.replicatedJobs[name=node].template.spec.template.spec.
// initContainers[name=flux-installer], upstream's "InitContainer 'flux-installer' is
// reserved", docs/compatibility.md#flux, which upstream reports at a TrainJob's
// admission).
func (flux) ValidateRuntime(spec *trainer.TrainingRuntimeSpec) field.ErrorList {
	rj := plan.ReplicatedJob(runtimeJobSet(spec), trainer.ReplicatedJobNode)
	if rj == nil || plan.Container(plan.PodSpec(rj).Containers, trainer.ContainerNode) == nil {
		return field.ErrorList{field.Invalid(replicatedJobsPath, field.OmitValueType{}, fmt.Sprintf(
			"mlPolicy.flux runs a Flux broker in the %q container of the replicatedJob %q, and the runtime has none: add it or use another mlPolicy",
			trainer.ContainerNode, trainer.ReplicatedJobNode))}
	}
	if plan.Container(plan.PodSpec(rj).InitContainers, fluxInstaller) != nil {
		return field.ErrorList{field.Invalid(replicatedJobsPath.Key("name="+trainer.ReplicatedJobNode).
			Child("template", "spec", "template", "spec", "initContainers").Key("name="+fluxInstaller), field.OmitValueType{}, fmt.Sprintf(
			"InitContainer '%s' is reserved: it is the one mlPolicy.flux adds; rename the runtime's", fluxInstaller))}
	}
	return nil
}

// ValidateTrainJob implements Plugin: Flux accepts every TrainJob its runtime accepts
// (numProcPerNode >= 1, upstream's other Flux rule, is the CRD's).
func (flux) ValidateTrainJob(*trainer.TrainJob, *plan.Plan) field.ErrorList { return nil }

// Apply implements Plugin. Errors: only for bugs (a runtime that did not pass
// ValidateRuntime).
func (f flux) Apply(tj *trainer.TrainJob, p *plan.Plan) error {
	js := p.JobSet
	rj := plan.ReplicatedJob(js, trainer.ReplicatedJobNode)
	var c *corev1.Container
	if rj != nil {
		c = plan.Container(plan.PodSpec(rj).Containers, trainer.ContainerNode)
	}
	if c == nil {
		return fmt.Errorf("mlpolicy: Flux runtime %s without a %q container in replicatedJob %q", p.Runtime.Ref(), trainer.ContainerNode, trainer.ReplicatedJobNode)
	}
	pod := plan.PodSpec(rj)

	settings := fluxSettings(c)
	scripts, err := fluxScripts(fluxParamsOf(tj, p, rj, settings))
	if err != nil {
		return err
	}
	setFluxCommand(tj, p.Runtime, c)

	entrypoint := tj.Name + fluxEntrypointSuffix
	curve := f.names.Name(tj, fluxCurvePurpose)
	addFluxVolumes(pod, c, entrypoint, curve, settings[envFluxViewImage])

	cm := plan.OwnedObject(tj, "v1", "ConfigMap", entrypoint)
	cm.Object["data"] = map[string]any{fluxEntrypointKey: scripts[fluxEntrypointKey], fluxInitKey: scripts[fluxInitKey]}
	p.Objects = append(p.Objects, cm)
	secret := plan.OwnedObject(tj, "v1", "Secret", curve)
	secret.Object["type"] = string(corev1.SecretTypeOpaque)
	name := tj.Name
	p.CreateOnly = append(p.CreateOnly, plan.CreateOnlyObject{Object: secret, Generate: func(obj *unstructured.Unstructured) error {
		return generateCurveCert(obj, name)
	}})
	return nil
}

// fluxSettings returns the settings of fluxDefaults, by env var name, each overridden
// by a plain value (not valueFrom, not empty) of that env var on the "node" container
// c, where the runtime's env is already overridden by spec.trainer.env.
func fluxSettings(c *corev1.Container) map[string]string {
	settings := map[string]string{}
	for k, v := range fluxDefaults {
		settings[k] = v
	}
	for _, e := range c.Env { // the runtime's env, overridden by spec.trainer.env
		if _, ok := settings[e.Name]; ok && e.ValueFrom == nil && e.Value != "" {
			settings[e.Name] = e.Value
		}
	}
	return settings
}

// fluxParamsOf returns the parameters of tj's scripts: nodes from spec.trainer.numNodes,
// else the count of the "node" replicatedJob rj; tasks per node from
// spec.trainer.numProcPerNode, else the runtime's mlPolicy.flux.numProcPerNode, else 1;
// GPUs per node from the node's resources; network device and queue policy from
// settings (fluxSettings).
func fluxParamsOf(tj *trainer.TrainJob, p *plan.Plan, rj *jobsetv1alpha2.ReplicatedJob, settings map[string]string) fluxParams {
	js := p.JobSet
	params := fluxParams{
		Name: tj.Name, Namespace: tj.Namespace, Subdomain: plan.Subdomain(js),
		NumNodes:      int64(plan.Count(rj)),
		Tasks:         int64(ptr.Deref(p.Runtime.Spec.MLPolicy.Flux.NumProcPerNode, 1)),
		GPUs:          gpuCount(nodeResources(tj, js)),
		NetworkDevice: settings[envFluxNetworkDev],
		QueuePolicy:   settings[envFluxQueuePolicy],
		Port:          fluxBrokerPort,
	}
	if t := tj.Spec.Trainer; t != nil {
		if t.NumNodes != nil {
			params.NumNodes = int64(*t.NumNodes)
		}
		if t.NumProcPerNode != nil {
			params.Tasks = int64(*t.NumProcPerNode)
		}
	}
	return params
}

// setFluxCommand makes the "node" container c run the entrypoint script with the
// command the brokers run as its one argument.
func setFluxCommand(tj *trainer.TrainJob, rt plan.Runtime, c *corev1.Container) {
	// The command the brokers run: the container's (spec.trainer.command or the
	// runtime's) with spec.trainer.args; the runtime's own args stay container args.
	words := c.Command
	if t := tj.Spec.Trainer; t != nil && t.Args != nil {
		words = append(append([]string(nil), words...), t.Args...)
		c.Args = nil
		if rc := runtimeNodeContainer(rt); rc != nil {
			c.Args = append([]string(nil), rc.Args...)
		}
	}
	c.Command = []string{"/bin/bash", fluxConfigDir + "/" + fluxEntrypointKey, strings.TrimSpace(strings.Join(words, " "))}
}

// addFluxVolumes adds to the "node" pod the volumes of Flux (its install and software
// directories, the scripts ConfigMap entrypoint, shared memory and the CURVE Secret
// curve), mounts them in its container c, and adds the init container
// "flux-installer", of image, that copies Flux into the install volume.
func addFluxVolumes(pod *corev1.PodSpec, c *corev1.Container, entrypoint, curve, image string) {
	for _, v := range []corev1.Volume{
		{Name: fluxSpackVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: fluxInstallVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: entrypoint, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: entrypoint}, DefaultMode: ptr.To[int32](0o755)}}},
		{Name: fluxSharedMemory, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
		{Name: fluxCurveVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: curve, DefaultMode: ptr.To[int32](0o400)}}},
	} {
		pod.Volumes = upsertVolume(pod.Volumes, v)
	}
	configMount := corev1.VolumeMount{Name: entrypoint, MountPath: fluxConfigDir, ReadOnly: true}
	installMount := corev1.VolumeMount{Name: fluxInstallVolume, MountPath: fluxInstallDir}
	for _, m := range []corev1.VolumeMount{
		installMount,
		{Name: fluxSpackVolume, MountPath: fluxSoftwareDir},
		configMount,
		{Name: fluxCurveVolume, MountPath: fluxCurveDir, ReadOnly: true},
		{Name: fluxSharedMemory, MountPath: "/dev/shm", ReadOnly: true},
	} {
		c.VolumeMounts = upsertVolumeMount(c.VolumeMounts, m)
	}
	pod.InitContainers = append(pod.InitContainers, corev1.Container{
		Name:         fluxInstaller,
		Image:        image,
		Command:      []string{"/bin/bash", fluxConfigDir + "/" + fluxInitKey},
		VolumeMounts: []corev1.VolumeMount{installMount, configMount},
	})
}

// runtimeNodeContainer is the runtime template's "node" container of the replicatedJob
// "node", or nil.
func runtimeNodeContainer(rt plan.Runtime) *corev1.Container {
	for i := range rt.Spec.Template.Spec.ReplicatedJobs {
		rj := &rt.Spec.Template.Spec.ReplicatedJobs[i]
		if rj.Name == trainer.ReplicatedJobNode {
			return plan.Container(rj.Template.Spec.Template.Spec.Containers, trainer.ContainerNode)
		}
	}
	return nil
}

// fluxScripts renders init.sh and entrypoint.sh for p.
func fluxScripts(p fluxParams) (map[string]string, error) {
	out := map[string]string{}
	for key, tmpl := range map[string]*template.Template{fluxInitKey: fluxInitScript, fluxEntrypointKey: fluxEntrypointScript} {
		var b strings.Builder
		if err := tmpl.Execute(&b, p); err != nil {
			return nil, fmt.Errorf("rendering Flux %s: %w", key, err)
		}
		out[key] = b.String()
	}
	return out, nil
}

// fluxInitScript runs in the flux-installer init container (the flux-view image): it
// copies Flux and its dependencies into the volume the trainer container mounts.
var fluxInitScript = template.Must(template.New(fluxInitKey).Parse(`#!/bin/bash
# Generated by Trainyard for TrainJob {{.Name}} (mlPolicy.flux): copies the Flux view
# of this image into the volume the trainer container shares.
set -euo pipefail
mkdir -p ` + fluxInstallDir + `
cp -a /opt/view ` + fluxInstallDir + `/view
cp -a /opt/software ` + fluxInstallDir + `/software
`))

// fluxEntrypointScript is the trainer container's command: it configures a broker for
// this pod and starts it; the rank 0 broker (the lead host) runs the job and ends the
// instance when it finishes.
var fluxEntrypointScript = template.Must(template.New(fluxEntrypointKey).Parse(`#!/bin/bash
# Generated by Trainyard for TrainJob {{.Name}} (mlPolicy.flux): starts this pod's Flux
# broker; the lead broker runs the command, given as the first argument, as one Flux
# job over all {{.NumNodes}} nodes.
set -euo pipefail
command="$1"
shift

# The view's links point into /opt/software.
cp -a ` + fluxInstallDir + `/software/. ` + fluxSoftwareDir + `/
view=` + fluxInstallDir + `/view
export PATH="$view/bin:$PATH"
export LD_LIBRARY_PATH="$view/lib:${LD_LIBRARY_PATH:-}"

config=` + fluxInstallDir + `/config
mkdir -p "$config"
flux R encode --hosts="{{.Hostlist}}" {{.ResourceFlags}} > "$config/R"
cat > "$config/broker.toml" <<EOF
[access]
allow-guest-user = true
allow-root-owner = true

[bootstrap]
curve_cert = "` + fluxCurveDir + `/` + fluxCurveKey + `"
default_port = {{.Port}}
default_bind = "tcp://{{.NetworkDevice}}:%p"
default_connect = "tcp://%h.{{.Subdomain}}.{{.Namespace}}.svc.cluster.local:%p"
hosts = [{ host = "{{.Hostlist}}" }]

[resource]
path = "$config/R"
noverify = true

[sched-fluxion-qmanager]
queue-policy = "{{.QueuePolicy}}"
EOF

if [ "$(hostname)" = "{{.LeadHost}}" ]; then
  # Word splitting of $command is intended: it is the command line.
  exec flux broker --config-path="$config" flux run {{.SubmitFlags}} $command "$@"
fi
exec flux broker --config-path="$config"
`))

// z85Alphabet is ZeroMQ's Z85 encoding alphabet (RFC 32/Z85).
const z85Alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"

// z85 encodes b (a multiple of 4 bytes) in Z85: each 4 bytes, big-endian, as 5 base-85
// digits.
func z85(b []byte) string {
	out := make([]byte, 0, len(b)/4*5)
	for i := 0; i+4 <= len(b); i += 4 {
		v := uint32(b[i])<<24 | uint32(b[i+1])<<16 | uint32(b[i+2])<<8 | uint32(b[i+3])
		var chunk [5]byte
		for j := 4; j >= 0; j-- {
			chunk[j] = z85Alphabet[v%85]
			v /= 85
		}
		out = append(out, chunk[:]...)
	}
	return string(out)
}

// generateCurveCert fills the Flux Secret with a ZeroMQ CURVE certificate (a fresh
// X25519 key pair, Z85-encoded, in the ZPL format czmq reads) named after the TrainJob.
func generateCurveCert(secret *unstructured.Unstructured, name string) error {
	key, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("generating the Flux CURVE key: %w", err)
	}
	cert := "#   ZeroMQ CURVE **Secret** Certificate, generated by Trainyard\n" +
		"#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.\n\n" +
		"metadata\n" +
		"    name = " + strconv.Quote(name) + "\n" +
		"curve\n" +
		"    public-key = \"" + z85(key.PublicKey().Bytes()) + "\"\n" +
		"    secret-key = \"" + z85(key.Bytes()) + "\"\n"
	secret.Object["data"] = map[string]any{fluxCurveKey: base64.StdEncoding.EncodeToString([]byte(cert))}
	return nil
}
