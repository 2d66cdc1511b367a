package app

import (
	"bytes"
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/mlpolicy"
)

// nameOf is the MPI SSH Secret name names give a fixed TrainJob, to compare keys.
func nameOf(names mlpolicy.SecretNames) string {
	tj := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "llm", UID: types.UID("uid-1")}}
	return names.Name(tj, "mpi-ssh-auth")
}

// TestLoadSecretNames: the key is generated and stored when the Secret is absent or
// empty (as the chart pre-creates it), read when it is there, the same for every
// replica, and a key of the wrong length is an error naming the Secret.
func TestLoadSecretNames(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	key := bytes.Repeat([]byte{1}, mlpolicy.SecretNameKeyBytes)
	stored, _ := mlpolicy.NewSecretNames(key)
	secret := func(data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "sys", Name: "names"}, Data: data}
	}
	for name, c := range map[string]struct {
		existing *corev1.Secret
		want     string // "" for a newly generated key
		err      bool
	}{
		"absent":              {},
		"pre-created empty":   {existing: secret(nil)},
		"holding a key":       {existing: secret(map[string][]byte{SecretNameKeyData: key}), want: nameOf(stored)},
		"holding a short key": {existing: secret(map[string][]byte{SecretNameKeyData: []byte("short")}), err: true},
		"other data is kept":  {existing: secret(map[string][]byte{"note": []byte("x")})},
	} {
		t.Run(name, func(t *testing.T) {
			var objs []runtime.Object
			if c.existing != nil {
				objs = append(objs, c.existing)
			}
			kube := fake.NewClientset(objs...)
			got, err := loadSecretNames(ctx, kube, "sys", "names", logger)
			if c.err {
				if err == nil {
					t.Fatal("want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.want != "" && nameOf(got) != c.want {
				t.Errorf("names from the stored key differ: %s, want %s", nameOf(got), c.want)
			}
			again, err := loadSecretNames(ctx, kube, "sys", "names", logger) // another replica, or a restart
			if err != nil || nameOf(again) != nameOf(got) {
				t.Errorf("a second load gives %s, %v; want the same names %s", nameOf(again), err, nameOf(got))
			}
			s, err := kube.CoreV1().Secrets("sys").Get(context.Background(), "names", metav1.GetOptions{})
			if err != nil || len(s.Data[SecretNameKeyData]) != mlpolicy.SecretNameKeyBytes {
				t.Errorf("stored Secret = %v, %v; want a %d-byte key", s, err, mlpolicy.SecretNameKeyBytes)
			}
			if c.existing != nil && c.existing.Data["note"] != nil && string(s.Data["note"]) != "x" {
				t.Errorf("other data lost: %v", s.Data)
			}
		})
	}
}

// TestLoadSecretNamesRace: a replica that loses the race to create the Secret uses the
// winner's key.
func TestLoadSecretNamesRace(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	kube := fake.NewClientset()
	winner := bytes.Repeat([]byte{9}, mlpolicy.SecretNameKeyBytes)
	kube.PrependReactor("create", "secrets", func(clienttesting.Action) (bool, runtime.Object, error) {
		// The other replica's create lands first.
		if err := kube.Tracker().Add(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "sys", Name: "names"},
			Data: map[string][]byte{SecretNameKeyData: winner}}); err != nil {
			t.Fatal(err)
		}
		return true, nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "secrets"}, "names")
	})
	got, err := loadSecretNames(ctx, kube, "sys", "names", logger)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := mlpolicy.NewSecretNames(winner)
	if nameOf(got) != nameOf(want) {
		t.Errorf("names %s, want the winner's %s", nameOf(got), nameOf(want))
	}
}
