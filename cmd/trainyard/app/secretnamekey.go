package app

import (
	"context"
	"crypto/rand"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/trainyard/trainyard/pkg/kubeclient"
	"github.com/trainyard/trainyard/pkg/stages/mlpolicy"
)

// SecretNameKeyData is the data key of the Secret-name key in its Secret
// (sideObjects.secretNameKeySecret).
const SecretNameKeyData = "key"

// secretNameKeyAttempts bounds loadSecretNames' rounds: each lost race (another replica
// created or filled the Secret first) ends with that replica's key at the next read.
const secretNameKeyAttempts = 3

// loadSecretNames returns the SecretNames of the installation's key: data key "key" of
// the Secret namespace/name, read by name (the controller may get that Secret only;
// Secrets are otherwise create-only to it). When the Secret is absent (`make run`, or an
// install that does not pre-create it) the controller creates it with a new random key;
// when it exists without one (the chart pre-creates it empty, so that no key is ever in
// a manifest: `helm template` and GitOps render no secret, and `helm upgrade` keeps the
// controller's) it fills it in with an update conditioned on the resourceVersion read.
// Replicas starting together race; the losers get AlreadyExists or Conflict, read the
// winner's key and use it, so all replicas name Secrets alike.
//
// Errors: the API errors of the get, create and update, and a key that is not
// mlpolicy.SecretNameKeyBytes long (someone wrote it; the message says how to fix it).
func loadSecretNames(ctx context.Context, kube kubeclient.Interface, namespace, name string, logger klog.Logger) (mlpolicy.SecretNames, error) {
	secrets := kube.CoreV1().Secrets(namespace)
	for range secretNameKeyAttempts {
		secret, err := secrets.Get(ctx, name, metav1.GetOptions{})
		exists := err == nil
		switch {
		case apierrors.IsNotFound(err):
			secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
		case err != nil:
			return mlpolicy.SecretNames{}, fmt.Errorf("reading the Secret-name key, Secret %s/%s: %w", namespace, name, err)
		case len(secret.Data[SecretNameKeyData]) > 0:
			names, err := mlpolicy.NewSecretNames(secret.Data[SecretNameKeyData])
			if err != nil {
				return names, fmt.Errorf("the Secret %s/%s, data key %q: %w; delete that data key (or the Secret) and restart the controller to generate a new one "+
					"(create-only Secrets of TrainJobs built afterwards get new names)", namespace, name, SecretNameKeyData, err)
			}
			return names, nil
		}
		key := make([]byte, mlpolicy.SecretNameKeyBytes)
		if _, err := rand.Read(key); err != nil {
			return mlpolicy.SecretNames{}, fmt.Errorf("generating the Secret-name key: %w", err)
		}
		if secret.Data == nil {
			secret.Data = map[string][]byte{}
		}
		secret.Data[SecretNameKeyData] = key
		if exists {
			_, err = secrets.Update(ctx, secret, metav1.UpdateOptions{}) // carries the resourceVersion read
		} else {
			_, err = secrets.Create(ctx, secret, metav1.CreateOptions{})
		}
		switch {
		case err == nil:
			logger.Info("Generated the Secret-name key", "secret", klog.KObj(secret))
			return mlpolicy.NewSecretNames(key)
		case apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err):
			continue // another replica stored its key first: read it
		default:
			return mlpolicy.SecretNames{}, fmt.Errorf("storing the Secret-name key in Secret %s/%s: %w", namespace, name, err)
		}
	}
	return mlpolicy.SecretNames{}, fmt.Errorf("the Secret %s/%s: the Secret-name key changed under every one of %d attempts to read or store it", namespace, name, secretNameKeyAttempts)
}
