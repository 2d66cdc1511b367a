package mlpolicy

import (
	"bytes"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
)

func mustSecretNames(t *testing.T, key []byte) SecretNames {
	t.Helper()
	n, err := NewSecretNames(key)
	if err != nil {
		t.Fatalf("NewSecretNames: %v", err)
	}
	return n
}

func namedTrainJob(name string, uid types.UID) *trainer.TrainJob {
	return &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: uid}}
}

func TestSecretNames(t *testing.T) {
	keyA := bytes.Repeat([]byte{'a'}, SecretNameKeyBytes)
	keyB := bytes.Repeat([]byte{'b'}, SecretNameKeyBytes)
	a, b := mustSecretNames(t, keyA), mustSecretNames(t, keyB)
	tj := namedTrainJob("llm", "6f1f3b4e-0000-4000-8000-000000000001")
	again := namedTrainJob("llm", "6f1f3b4e-0000-4000-8000-000000000002") // re-created: another UID

	name := a.Name(tj, mpiSSHAuthPurpose)
	if !strings.HasPrefix(name, "llm-mpi-ssh-auth-") || len(name) != len("llm-mpi-ssh-auth-")+secretNameSuffixLength {
		t.Errorf("Name = %q, want llm-mpi-ssh-auth-<%d characters>", name, secretNameSuffixLength)
	}
	if got := mustSecretNames(t, append([]byte(nil), keyA...)).Name(tj.DeepCopy(), mpiSSHAuthPurpose); got != name {
		t.Errorf("Name is not deterministic: %q, then %q", name, got)
	}
	if got := a.Name(again, mpiSSHAuthPurpose); got == name {
		t.Errorf("a TrainJob re-created under the same name (another UID) gets the same Secret name %q", got)
	}
	if got := b.Name(tj, mpiSSHAuthPurpose); got == name {
		t.Errorf("another installation's key gives the same Secret name %q", got)
	}
	if mpiName, fluxName := a.Name(tj, mpiSSHAuthPurpose), a.Name(tj, fluxCurvePurpose); strings.TrimPrefix(mpiName, "llm-mpi-ssh-auth") != strings.TrimPrefix(fluxName, "llm-flux-curve") {
		t.Errorf("purposes should share the TrainJob's suffix: %q, %q", mpiName, fluxName)
	}
	// The zero value's names are pinned: the render golden files and tests rely on them.
	if got, want := (SecretNames{}).Name(namedTrainJob("test-job", plantest.TrainJobUID), mpiSSHAuthPurpose), "test-job-mpi-ssh-auth"+testSecretSuffix; got != want {
		t.Errorf("zero SecretNames: Name = %q, want %q", got, want)
	}
}

func TestSecretNamesAreValidAndBounded(t *testing.T) {
	n := mustSecretNames(t, bytes.Repeat([]byte{7}, SecretNameKeyBytes))
	long := strings.Repeat("a", 228) + "." + strings.Repeat("b", 30) // cut right after the "."
	for _, name := range []string{"a", "llm", strings.Repeat("x", 63), strings.Repeat("y", 253), long} {
		for _, uid := range []types.UID{"u1", "u2"} {
			got := n.Name(namedTrainJob(name, uid), mpiSSHAuthPurpose)
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Errorf("Name(%d-character TrainJob name) = %q: not a valid Secret name: %v", len(name), got, errs)
			}
			if len(name) <= 63 && !strings.HasPrefix(got, name+"-") {
				t.Errorf("Name = %q, want the whole TrainJob name %q first", got, name)
			}
		}
		if u1, u2 := n.Name(namedTrainJob(name, "u1"), mpiSSHAuthPurpose), n.Name(namedTrainJob(name, "u2"), mpiSSHAuthPurpose); u1 == u2 {
			t.Errorf("two UIDs of the %d-character TrainJob name share the Secret name %q", len(name), u1)
		}
	}
}

func TestNewSecretNamesRefusesAShortKey(t *testing.T) {
	for _, size := range []int{0, 16, SecretNameKeyBytes + 1} {
		if _, err := NewSecretNames(make([]byte, size)); err == nil {
			t.Errorf("NewSecretNames(%d bytes) = nil error, want one", size)
		}
	}
}
