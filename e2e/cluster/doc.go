// Package cluster runs a real, single-machine Kubernetes control plane for
// Trainyard's local development loop (`make cluster-up`) and its end-to-end
// tests, without Docker or a kubelet.
//
// The control plane is made of upstream binaries, built once from pinned module
// versions, stamped with their release versions as a release build is, and
// cached outside the clone (see [Build]):
//
//	etcd v3.6.8
//	kube-apiserver, kube-controller-manager, kube-scheduler (k8s.io/kubernetes v1.36.3,
//	  or v1.37.2 with Options.KubeVersion "1.37", see [KubeRelease])
//	JobSet controller v0.12.0 (with its mutating and validating webhooks)
//	kwok v0.8.0, which fakes nodes and drives pod phases through Stage objects
//	kubectl v1.36.3, not run by the cluster: tests use it as users do ([Kubectl])
//	Kueue v0.19.1, with Options.Kueue only (its metrics certificate path patched, see [KueueSource])
//
// [Up] starts them as child processes on free 127.0.0.1 ports, each in its own
// process group with its output in <StateDir>/logs/<component>.log; enables the
// Workload API (scheduling.k8s.io/v1alpha2, gates GenericWorkload and
// GangScheduling; on 1.37 v1beta1, gates GenericWorkload and
// DRAWorkloadResourceClaims: [Cluster.WorkloadAPI]) and DRA; installs the CRDs Trainyard works with (Trainyard's
// own, JobSet, scheduler-plugins and Volcano PodGroups); registers kwok fake
// GPU nodes with a DRA DeviceClass and one ResourceSlice per node; and writes an
// admin kubeconfig plus a state file so that [DownFromState] can clean up after
// a process that died without calling [Cluster.Down].
//
// With Options.Kueue it also runs the Kueue controller manager with the TrainJob
// integration ([KueueConfiguration]), its CRDs installed and its TrainJob and
// Kueue webhooks registered over 127.0.0.1 with the cluster CA, as the JobSet
// ones are: a TrainJob labelled [KueueQueueNameLabel] is suspended at creation
// and given Kueue's runtime patch, as in a real installation.
//
// Pods on the fake nodes follow the kwok stages in assets/pod-stages.yaml: they
// start within about a second; pods owned by a Job complete after
// [DefaultPodCompleteDelay] unless the annotation [AnnotationCompleteDelay]
// says otherwise; any pod annotated with [AnnotationFailAfter] fails after that
// duration with exit code 1.
//
// Tests use [ForTests] from TestMain, then [Shared] and [NewNamespace]. Fault
// tests use [ForTestsWith] for a cluster of their own (e.g. with
// Options.AuditLog, read with [AuditLogReader]), stop and start one component
// in place with [Cluster.StopComponent] and [Cluster.StartComponent], and tell
// processes apart in the audit log with [Cluster.UserKubeconfig].
package cluster
