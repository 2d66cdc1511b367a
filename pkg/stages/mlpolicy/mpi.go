package mlpolicy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
)

// Names and paths of the MPI side objects and their volumes
// (docs/compatibility.md#objects-per-trainjob, docs/compatibility.md#mpi).
const (
	// mpiSSHAuthPurpose names the SSH auth Secret: "<trainjob>-mpi-ssh-auth-<suffix>"
	// (SecretNames).
	mpiSSHAuthPurpose = "mpi-ssh-auth"
	// mpiHostfileSuffix names the hostfile ConfigMap: "<trainjob>-mpi-hostfile".
	mpiHostfileSuffix = "-mpi-hostfile"

	mpiSSHAuthVolume  = "mpi-ssh-auth"
	mpiHostfileVolume = "mpi-hostfile"
	// mpiHostfileKey is the ConfigMap key and the file name under mpiHostfileDir.
	mpiHostfileKey = "hostfile"
	mpiHostfileDir = "/etc/mpi"
	mpiHostfile    = mpiHostfileDir + "/" + mpiHostfileKey

	// The files the SSH Secret projects into sshAuthMountPath, as OpenSSH expects them.
	sshPrivateKeyFile     = "id_rsa"
	sshPublicKeyFile      = "id_rsa.pub"
	sshAuthorizedKeysFile = "authorized_keys"

	// sshConnectArgs makes the launcher's ssh retry while worker pods start.
	sshConnectArgs = "-o ConnectionAttempts=10"
)

// Volume file modes (docs/compatibility.md#mpi): the key readable by its owner and
// group (fsGroup), the public files by everyone, the hostfile read-only.
var (
	modeSecretDefault = ptr.To[int32](0o400)
	modePrivateKey    = ptr.To[int32](0o640)
	modePublic        = ptr.To[int32](0o644)
	modeHostfile      = ptr.To[int32](0o444)
)

type mpi struct{ names SecretNames }

// MPI returns the mlPolicy.mpi plugin (docs/compatibility.md#mpi): the "node"
// replicatedJob sized from spec.trainer.numNodes (one fewer when the launcher is also a
// node), the SSH auth Secret and the hostfile ConfigMap as side objects, their volumes
// and mounts on the launcher and node pods, and the MPI implementation's env on the
// launcher.
//
// The Secret <trainjob>-mpi-ssh-auth-<suffix> (names: SecretNames; type
// kubernetes.io/ssh-auth, immutable; upstream's is <trainjob>-mpi-ssh-auth) holds an
// ECDSA P-521 key: "ssh-privatekey" as a PEM "EC PRIVATE KEY" block and
// "ssh-publickey" in authorized_keys format. It is a plan.CreateOnlyObject: the key is
// generated only when the status stage creates the Secret, once per TrainJob, so a
// rebuild neither changes the desired state's hash nor rewrites the key under running
// pods.
//
// The ConfigMap <trainjob>-mpi-hostfile has key "hostfile": one line per pod of the
// replicatedJob "node", and of "launcher" when runLauncherAsNode, in template order,
// naming the pod by its stable DNS name with its slots (numProcPerNode): OpenMPI
// "<host> slots=<n>", Intel MPI and MPICH "<host>:<n>".
func MPI(names SecretNames) Plugin { return mpi{names: names} }

func (mpi) Name() string { return "MPI" }

func (mpi) Enabled(p *trainer.MLPolicy) bool { return p != nil && p.MPI != nil }

// mpiConfig is a runtime's mlPolicy.mpi with the CRD defaults applied
// (docs/compatibility.md#api-defaults), and the slots per node for this TrainJob.
type mpiConfig struct {
	impl              trainer.MPIImplementation
	sshAuthMountPath  string
	runLauncherAsNode bool
	slots             int64
}

// ValidateRuntime implements Plugin. A "launcher" replicatedJob is required: it runs
// mpirun and is the only pod that gets the hostfile and the implementation's env.
// Upstream builds such a JobSet anyway; its workers then wait for a launcher that never
// comes. Without runLauncherAsNode a "node" replicatedJob is required too, or the
// hostfile would list no pod. Both are Invalid at spec.template.spec.replicatedJobs.
func (mpi) ValidateRuntime(spec *trainer.TrainingRuntimeSpec) field.ErrorList {
	var errs field.ErrorList
	js := runtimeJobSet(spec)
	if plan.ReplicatedJob(js, trainer.ReplicatedJobLauncher) == nil {
		errs = append(errs, field.Invalid(replicatedJobsPath, field.OmitValueType{}, fmt.Sprintf(
			"mlPolicy.mpi needs a replicatedJob named %q whose %q container runs mpirun; "+
				"add one (see the shipped deepspeed-distributed runtime) or use another mlPolicy",
			trainer.ReplicatedJobLauncher, trainer.ContainerNode)))
	}
	if plan.ReplicatedJob(js, trainer.ReplicatedJobNode) == nil && !ptr.Deref(spec.MLPolicy.MPI.RunLauncherAsNode, false) {
		errs = append(errs, field.Invalid(replicatedJobsPath, field.OmitValueType{}, fmt.Sprintf(
			"mlPolicy.mpi without runLauncherAsNode lists only the pods of the replicatedJob %q in the hostfile, "+
				"and the runtime has none: add a %q replicatedJob or set mlPolicy.mpi.runLauncherAsNode to true",
			trainer.ReplicatedJobNode, trainer.ReplicatedJobNode)))
	}
	return errs
}

// ValidateTrainJob implements Plugin, with upstream's admission rules
// (docs/compatibility.md#mpi): spec.trainer.numNodes of 2 or more is Invalid when the
// runtime runs the launcher as its only node (runLauncherAsNode and no "node"
// replicatedJob to scale), and spec.trainer.env must not set the variables the launcher
// gets (OpenMPI's OMPI_MCA_*, and likewise Intel MPI's and MPICH's), Invalid at
// spec.trainer.env. And Trainyard's: the hostfile must fit in its ConfigMap
// (hostfileFits), Invalid at spec.trainer.numNodes.
func (mpi) ValidateTrainJob(tj *trainer.TrainJob, p *plan.Plan) field.ErrorList {
	var errs field.ErrorList
	pol := p.Runtime.Spec.MLPolicy.MPI
	noNode := plan.ReplicatedJob(runtimeJobSet(p.Runtime.Spec), trainer.ReplicatedJobNode) == nil
	if t := tj.Spec.Trainer; t != nil && t.NumNodes != nil && *t.NumNodes >= 2 && noNode && ptr.Deref(pol.RunLauncherAsNode, false) {
		errs = append(errs, field.Invalid(trainerPath.Child("numNodes"), *t.NumNodes, fmt.Sprintf(
			"must have 1 when MPI trainingRuntime with enabled runLauncherAsNode does not have either launcher and node: "+
				"must be 1: runtime %s runs the MPI launcher as the only node and has no %q replicatedJob to scale; "+
				"remove spec.trainer.numNodes or use a runtime with a %q replicatedJob",
			p.Runtime.Ref(), trainer.ReplicatedJobNode, trainer.ReplicatedJobNode)))
	}
	impl := mpiImplementation(pol)
	errs = append(errs, reservedEnv(tj, mpiReservedEnv(impl), fmt.Sprintf("mlPolicy.mpi (the %s launcher's variables)", impl))...)
	if cfg, err := mpiSettings(tj, p); err == nil { // an unsupported implementation is Apply's to report
		errs = append(errs, hostfileFits(tj, p.JobSet, cfg)...)
	}
	return errs
}

// hostfileFits returns the finding, at spec.trainer.numNodes, when the hostfile Apply
// would build for tj from js (the JobSet before the ML policy) does not fit in its
// ConfigMap, without building it.
func hostfileFits(tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet, cfg mpiConfig) field.ErrorList {
	hosts := &jobsetv1alpha2.JobSet{ObjectMeta: metav1.ObjectMeta{Name: js.Name}, Spec: jobsetv1alpha2.JobSetSpec{Network: js.Spec.Network}}
	for i := range js.Spec.ReplicatedJobs {
		rj := js.Spec.ReplicatedJobs[i] // a shallow copy: SetCount replaces its count pointers only
		if !isHost(&rj, cfg) {
			continue
		}
		if n, ok := nodeCount(tj, cfg); ok && rj.Name == trainer.ReplicatedJobNode {
			plan.SetCount(&rj, n)
		}
		hosts.Spec.ReplicatedJobs = append(hosts.Spec.ReplicatedJobs, rj)
	}
	size, n := hostfileSize(hosts, cfg)
	if size <= maxHostfileBytes {
		return nil
	}
	var value any = field.OmitValueType{}
	if t := tj.Spec.Trainer; t != nil && t.NumNodes != nil {
		value = *t.NumNodes
	}
	return field.ErrorList{field.Invalid(trainerPath.Child("numNodes"), value, hostfileTooLarge(n))}
}

// hostfileTooLarge is the message of a hostfile of hosts lines that does not fit.
func hostfileTooLarge(hosts int64) string {
	return fmt.Sprintf("the MPI hostfile would list %d hosts in more than the %d bytes a ConfigMap holds: "+
		"lower spec.trainer.numNodes (or, with mlPolicy.mpi.runLauncherAsNode, the replicas of the runtime's %q replicatedJob)",
		hosts, maxHostfileBytes, trainer.ReplicatedJobLauncher)
}

// nodeCount is the pod count Apply gives the "node" replicatedJob for tj:
// spec.trainer.numNodes, one fewer (at least 1) when the launcher is also a node; false
// when tj does not set numNodes.
func nodeCount(tj *trainer.TrainJob, cfg mpiConfig) (int32, bool) {
	t := tj.Spec.Trainer
	if t == nil || t.NumNodes == nil {
		return 0, false
	}
	if cfg.runLauncherAsNode {
		return max(*t.NumNodes-1, 1), true
	}
	return *t.NumNodes, true
}

// Apply implements Plugin. Errors: *plan.UnsupportedError for an mpiImplementation
// Trainyard does not know, before anything is changed; *plan.InvalidInputError when the
// hostfile would not fit in its ConfigMap (hostfileContent).
func (m mpi) Apply(tj *trainer.TrainJob, p *plan.Plan) error {
	js := p.JobSet
	cfg, err := mpiSettings(tj, p)
	if err != nil {
		return err
	}

	if n, ok := nodeCount(tj, cfg); ok {
		if rj := plan.ReplicatedJob(js, trainer.ReplicatedJobNode); rj != nil {
			plan.SetCount(rj, n)
		}
	}

	secretName := m.names.Name(tj, mpiSSHAuthPurpose)
	hostfileName := tj.Name + mpiHostfileSuffix
	sshVolume := corev1.Volume{Name: mpiSSHAuthVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName:  secretName,
		DefaultMode: modeSecretDefault,
		Items: []corev1.KeyToPath{
			{Key: corev1.SSHAuthPrivateKey, Path: sshPrivateKeyFile, Mode: modePrivateKey},
			{Key: sshPublicKeyKey, Path: sshPublicKeyFile, Mode: modePublic},
			{Key: sshPublicKeyKey, Path: sshAuthorizedKeysFile, Mode: modePublic},
		},
	}}}
	hostfileVolume := corev1.Volume{Name: mpiHostfileVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: hostfileName},
		Items:                []corev1.KeyToPath{{Key: mpiHostfileKey, Path: mpiHostfileKey, Mode: modeHostfile}},
	}}}
	sshMount := corev1.VolumeMount{Name: mpiSSHAuthVolume, MountPath: cfg.sshAuthMountPath}
	for _, name := range []string{trainer.ReplicatedJobNode, trainer.ReplicatedJobLauncher} {
		rj := plan.ReplicatedJob(js, name)
		if rj == nil {
			continue
		}
		pod := plan.PodSpec(rj)
		pod.Volumes = upsertVolume(pod.Volumes, sshVolume)
		c := plan.Container(pod.Containers, trainer.ContainerNode)
		if c != nil {
			c.VolumeMounts = upsertVolumeMount(c.VolumeMounts, sshMount)
		}
		if name != trainer.ReplicatedJobLauncher {
			continue
		}
		pod.Volumes = upsertVolume(pod.Volumes, hostfileVolume)
		if c != nil {
			c.VolumeMounts = upsertVolumeMount(c.VolumeMounts, corev1.VolumeMount{Name: mpiHostfileVolume, MountPath: mpiHostfileDir})
			c.Env = plan.UpsertEnv(c.Env, launcherEnv(cfg)...)
		}
	}

	secret := plan.OwnedObject(tj, "v1", "Secret", secretName)
	secret.Object["type"] = string(corev1.SecretTypeSSHAuth)
	secret.Object["immutable"] = true
	content, err := hostfileContent(js, cfg)
	if err != nil {
		return err
	}
	hostfile := plan.OwnedObject(tj, "v1", "ConfigMap", hostfileName)
	hostfile.Object["data"] = map[string]any{mpiHostfileKey: content}
	p.CreateOnly = append(p.CreateOnly, plan.CreateOnlyObject{Object: secret, Generate: generateSSHAuth})
	p.Objects = append(p.Objects, hostfile)
	return nil
}

// sshPublicKeyKey is the Secret key of the public key (kubernetes.io/ssh-auth defines
// only the private key's).
const sshPublicKeyKey = "ssh-publickey"

// mpiSettings resolves the runtime's MPI policy for tj.
//
// Slots per node (docs/compatibility.md#mpi): spec.trainer.numProcPerNode when set;
// else the policy's numProcPerNode (default 1), except that a policy value of 1 on
// nodes with more than one GPU becomes the GPU count.
func mpiSettings(tj *trainer.TrainJob, p *plan.Plan) (mpiConfig, error) {
	pol := p.Runtime.Spec.MLPolicy.MPI
	cfg := mpiConfig{
		impl:              mpiImplementation(pol),
		sshAuthMountPath:  ptr.Deref(pol.SSHAuthMountPath, "/root/.ssh"),
		runLauncherAsNode: ptr.Deref(pol.RunLauncherAsNode, false),
		slots:             int64(ptr.Deref(pol.NumProcPerNode, 1)),
	}
	switch cfg.impl {
	case trainer.MPIImplementationOpenMPI, trainer.MPIImplementationIntel, trainer.MPIImplementationMPICH:
	default:
		return cfg, &plan.UnsupportedError{Object: p.Runtime.Ref(), Feature: fmt.Sprintf(
			"mlPolicy.mpi.mpiImplementation %q (supported: OpenMPI, Intel, MPICH)", cfg.impl)}
	}
	if t := tj.Spec.Trainer; t != nil && t.NumProcPerNode != nil {
		cfg.slots = int64(*t.NumProcPerNode)
	} else if gpus := gpuCount(nodeResources(tj, p.JobSet)); cfg.slots == 1 && gpus > 1 {
		cfg.slots = gpus
	}
	return cfg, nil
}

// mpiImplementation is pol's mpiImplementation, OpenMPI when unset or empty (the CRD
// default, docs/compatibility.md#api-defaults).
func mpiImplementation(pol *trainer.MPIMLPolicySource) trainer.MPIImplementation {
	if impl := ptr.Deref(pol.MPIImplementation, ""); impl != "" {
		return impl
	}
	return trainer.MPIImplementationOpenMPI
}

// launcherEnv is the env of the launcher's "node" container: where the hostfile is, how
// many slots a host has, and ssh options, in the implementation's variables. OpenMPI's
// are docs/compatibility.md#mpi's; Intel MPI's and MPICH's are the MPI Operator's.
func launcherEnv(cfg mpiConfig) []corev1.EnvVar {
	slots := strconv.FormatInt(cfg.slots, 10)
	switch cfg.impl {
	case trainer.MPIImplementationIntel:
		return []corev1.EnvVar{
			{Name: "I_MPI_HYDRA_HOST_FILE", Value: mpiHostfile},
			{Name: "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", Value: sshConnectArgs},
			{Name: "I_MPI_PERHOST", Value: slots},
		}
	case trainer.MPIImplementationMPICH:
		return []corev1.EnvVar{
			{Name: "HYDRA_HOST_FILE", Value: mpiHostfile},
			{Name: "HYDRA_LAUNCH_EXTRA_ARGS", Value: sshConnectArgs},
		}
	default:
		return []corev1.EnvVar{
			{Name: "OMPI_MCA_orte_default_hostfile", Value: mpiHostfile},
			// Keep pod DNS names whole: their first label alone does not resolve.
			{Name: "OMPI_MCA_orte_keep_fqdn_hostnames", Value: "true"},
			{Name: "OMPI_MCA_orte_set_default_slots", Value: slots},
			{Name: "OMPI_MCA_plm_rsh_args", Value: sshConnectArgs},
		}
	}
}

// mpiReservedEnv is the names launcherEnv sets for impl.
func mpiReservedEnv(impl trainer.MPIImplementation) []string {
	env := launcherEnv(mpiConfig{impl: impl})
	names := make([]string, len(env))
	for i := range env {
		names[i] = env[i].Name
	}
	return names
}

// maxHostfileBytes is the largest hostfile: the data of a ConfigMap is limited to 1 MiB
// (the API server applies corev1.MaxSecretSize to ConfigMaps too).
const maxHostfileBytes = corev1.MaxSecretSize

// isHost reports whether the pods of rj are MPI hosts, listed in the hostfile.
func isHost(rj *jobsetv1alpha2.ReplicatedJob, cfg mpiConfig) bool {
	return rj.Name == trainer.ReplicatedJobNode || (cfg.runLauncherAsNode && rj.Name == trainer.ReplicatedJobLauncher)
}

// hostfileContent is the hostfile: a line per pod of the hosts' replicatedJobs ("node",
// and "launcher" when it is also a node), in template order, each replica's pods in
// index order (docs/compatibility.md#plugin-order endpoints,
// docs/compatibility.md#mpi).
//
// Errors: *plan.InvalidInputError at spec.trainer.numNodes when the hostfile would not
// fit in a ConfigMap (maxHostfileBytes, some 20,000 hosts), checked before anything is
// built: the counts come from the TrainJob and the runtime (up to 2^31 pods per Job,
// 2^31 Jobs), and building such a hostfile would exhaust the controller's memory.
// ValidateTrainJob refuses such a TrainJob first (hostfileFits); this check remains for
// SetMPISlots, whose slots per host may be longer.
func hostfileContent(js *jobsetv1alpha2.JobSet, cfg mpiConfig) (string, error) {
	if size, hosts := hostfileSize(js, cfg); size > maxHostfileBytes {
		return "", &plan.InvalidInputError{Field: trainerPath.Child("numNodes").String(), Message: hostfileTooLarge(hosts)}
	}
	var b strings.Builder
	for i := range js.Spec.ReplicatedJobs {
		rj := &js.Spec.ReplicatedJobs[i]
		if !isHost(rj, cfg) {
			continue
		}
		replicas := int(max(rj.Replicas, 1)) // JobSet defaults replicas to 1
		for job := range replicas {
			for pod := range int(plan.Count(rj)) {
				b.WriteString(plan.Endpoint(js, rj.Name, job, pod))
				if cfg.impl == trainer.MPIImplementationOpenMPI {
					b.WriteString(" slots=")
				} else {
					b.WriteString(":")
				}
				b.WriteString(strconv.FormatInt(cfg.slots, 10))
				b.WriteString("\n")
			}
		}
	}
	return b.String(), nil
}

// hostfileSize returns an upper bound of the bytes hostfileContent writes (every index
// counted with the digits of the largest), without building it, and the hosts it lists
// (at most math.MaxInt64). It stops adding bytes once the bound passes
// maxHostfileBytes, so neither can overflow.
func hostfileSize(js *jobsetv1alpha2.JobSet, cfg mpiConfig) (size, hosts int64) {
	digits := func(n int64) int64 { return int64(len(strconv.FormatInt(n, 10))) }
	// "<jobset>-<rj>-<job>-<pod>.<subdomain>" then " slots=<n>" or ":<n>", newline.
	fixed := int64(len(js.Name)+len(plan.Subdomain(js))+len(" slots=")+4) + digits(cfg.slots)
	for i := range js.Spec.ReplicatedJobs {
		rj := &js.Spec.ReplicatedJobs[i]
		if !isHost(rj, cfg) {
			continue
		}
		replicas, pods := int64(max(rj.Replicas, 1)), int64(max(plan.Count(rj), 0))
		n := replicas * pods // < 2^62
		hosts = min(hosts, math.MaxInt64-n) + n
		switch {
		case size > maxHostfileBytes:
		case n > maxHostfileBytes: // every line is longer than a byte
			size = maxHostfileBytes + 1
		default:
			size += n * (fixed + int64(len(rj.Name)) + digits(replicas-1) + digits(max(pods-1, 0)))
		}
	}
	return size, hosts
}

// generateSSHAuth fills an ssh-auth Secret with a fresh ECDSA P-521 key pair
// (docs/compatibility.md#mpi): "ssh-privatekey" a PEM "EC PRIVATE KEY" block (SEC 1,
// the format OpenSSH reads as id_rsa whatever the algorithm), "ssh-publickey" an
// authorized_keys line. Values are base64, as a Secret's data is on the wire.
func generateSSHAuth(secret *unstructured.Unstructured) error {
	key, err := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating the MPI SSH key: %w", err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("encoding the MPI SSH key: %w", err)
	}
	pub, err := ssh.NewPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("encoding the MPI SSH public key: %w", err)
	}
	secret.Object["data"] = map[string]any{
		corev1.SSHAuthPrivateKey: base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})),
		sshPublicKeyKey:          base64.StdEncoding.EncodeToString(ssh.MarshalAuthorizedKey(pub)),
	}
	return nil
}

// upsertVolume sets v in vols by name: replaced in place, else appended.
func upsertVolume(vols []corev1.Volume, v corev1.Volume) []corev1.Volume {
	for i := range vols {
		if vols[i].Name == v.Name {
			vols[i] = *v.DeepCopy()
			return vols
		}
	}
	return append(vols, *v.DeepCopy())
}

// upsertVolumeMount sets m in mounts by mountPath (the strategic-merge key of
// volumeMounts): replaced in place, else appended.
func upsertVolumeMount(mounts []corev1.VolumeMount, m corev1.VolumeMount) []corev1.VolumeMount {
	for i := range mounts {
		if mounts[i].MountPath == m.MountPath {
			mounts[i] = m
			return mounts
		}
	}
	return append(mounts, m)
}
