package certs

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
)

// TestDeletedWebhookConfigurationStaysDeleted: a configuration deleted while the
// informer cache still holds it (helm uninstall, with the controller's Pods still
// shutting down) is neither re-created nor reported as a sync error. A re-created
// configuration with failurePolicy Fail and no Service behind it would refuse every
// TrainJob write in the cluster; the error would only be logged and retried until
// the informer caught up.
func TestDeletedWebhookConfigurationStaysDeleted(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := newAPIClient() // deleted: the API server has neither configuration
	o := testOptions(nil, nil)
	configs, err := newWebhookConfigs(client, &o, func() {})
	if err != nil {
		t.Fatal(err)
	}
	for i, obj := range webhookConfigs() {
		// The caches (not started) as they were before the delete reached them.
		if err := configs[i].informer.GetStore().Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	m := &Manager{}
	for _, w := range configs {
		if w.cached() == nil {
			t.Fatalf("%s %s: not in the stale cache", w.kind, w.name)
		}
		if err := m.syncWebhook(ctx, w, []byte("a new bundle")); err != nil {
			t.Errorf("%s %s deleted: sync error %v, want none (nothing left to publish to)", w.kind, w.name, err)
		}
	}
	for _, resource := range []string{"validatingwebhookconfigurations", "mutatingwebhookconfigurations"} {
		if creates, updates := client.writes(resource); creates != 0 || updates != 0 {
			t.Errorf("%s: %d creates and %d updates, want none", resource, creates, updates)
		}
	}
	api := client.AdmissionregistrationV1()
	if v, err := api.ValidatingWebhookConfigurations().Get(ctx, testVWC, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ValidatingWebhookConfiguration %s: %v, %v; want it still deleted", testVWC, v, err)
	}
	if mw, err := api.MutatingWebhookConfigurations().Get(ctx, testMWC, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("MutatingWebhookConfiguration %s: %v, %v; want it still deleted", testMWC, mw, err)
	}
}
