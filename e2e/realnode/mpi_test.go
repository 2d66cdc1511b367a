package realnode

import (
	"context"
	"regexp"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard/trainyard/e2e/training"
)

// TestMPIAllreduceOverSSHOnTheDeepSpeedRuntime: upstream's deepspeed-distributed
// runtime, unchanged, runs a TrainJob of 3 nodes: the launcher (a node itself,
// runLauncherAsNode) and 2 nodes running sshd as mpiuser. JobSet starts the launcher
// only once the nodes are ready (its dependsOn); mpirun reads the hostfile from the
// controller's ConfigMap and starts one process on each node over SSH with the key
// pair from the controller's Secret; the processes all-reduce with mpi4py. The
// TrainJob ends Complete (the runtime's successPolicy: the launcher).
func TestMPIAllreduceOverSSHOnTheDeepSpeedRuntime(t *testing.T) {
	e := newEnv(t)
	e.installRuntime(t, deepSpeedRuntimeFile, nil)
	tj, err := training.MPIAllreduceTrainJob(e.repo, e.ns, "mpi", 3)
	if err != nil {
		t.Fatal(err)
	}
	e.create(t, tj)
	e.waitComplete(t, tj.Name)

	// Pods by hostname (JobSet's <jobset>-<replicatedJob>-<job>-<index>, what the
	// hostfile names and what a process there sees), the launcher apart.
	var launcher, launcherPod string
	nodes := map[string]bool{}
	for _, p := range e.trainerPods(t, tj.Name) {
		switch rj := p.Labels["jobset.sigs.k8s.io/replicatedjob-name"]; rj {
		case "launcher":
			launcher, launcherPod = p.Spec.Hostname, p.Name
		case "node":
			nodes[p.Spec.Hostname] = true
		default:
			t.Errorf("pod %s of replicatedJob %q", p.Name, rj)
		}
	}
	if launcher == "" || len(nodes) != 2 {
		t.Fatalf("launcher %q and nodes %v, want a launcher and 2 nodes: %s", launcher, nodes, e.podStates(context.Background()))
	}
	log := podLog(t, e.c, e.ns, launcherPod, "node")
	if !strings.Contains(log, "allreduce over 3 ranks on 3 hosts: sum 6") {
		t.Fatalf("the launcher's log does not show an all-reduce of 3 ranks on 3 hosts:\n%s\n%s", log, e.logs(t, tj.Name))
	}
	// Every pod of the TrainJob ran a rank.
	ranks := regexp.MustCompile(`rank \d of 3 on (\S+)`).FindAllStringSubmatch(log, -1)
	seen := map[string]bool{}
	for _, r := range ranks {
		seen[r[1]] = true
	}
	for host := range nodes {
		if !seen[host] {
			t.Errorf("no rank ran on node %s; ranks: %v", host, ranks)
		}
	}
	if !seen[launcher] {
		t.Errorf("no rank ran on the launcher %s (runLauncherAsNode); ranks: %v", launcher, ranks)
	}

	// The side objects mpirun used are the controller's: the hostfile lists the 3 pods.
	cm, err := e.c.Client().CoreV1().ConfigMaps(e.ns).Get(context.Background(), tj.Name+"-mpi-hostfile", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if hosts := strings.Count(cm.Data["hostfile"], "slots=1"); hosts != 3 {
		t.Errorf("hostfile lists %d hosts with 1 slot, want 3:\n%s", hosts, cm.Data["hostfile"])
	}
	t.Log(strings.TrimSpace(log))
}
