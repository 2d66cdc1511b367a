package metrics

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestWriteKind(t *testing.T) {
	for path, want := range map[string]string{
		"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets":                      KindJobSet,
		"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets/{name}":               KindJobSet,
		"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status": KindTrainJob,
		"/api/v1/namespaces/{namespace}/events":                                              KindEvent,
		"/api/v1/namespaces/{namespace}/configmaps/{name}":                                   KindConfigMap,
		"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}":                  KindLease,
		"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{name}":       KindValidatingWebhookConfiguration,
		"/prefix/apis/kueue.x-k8s.io/v1beta1/namespaces/{namespace}/workloads/{name}":        KindWorkload, // behind a base path
		"/apis/authentication.k8s.io/v1/tokenreviews":                                        KindOther,
		"/api/v1/namespaces/{name}":                                                          KindOther, // a Namespace, not a namespaced object
		"/api/v1/namespaces":                                                                 KindOther,
		"/healthz":                                                                           KindOther,
		"":                                                                                   KindOther,
	} {
		if got := writeKind(path); got != want {
			t.Errorf("writeKind(%q) = %q, want %q", path, got, want)
		}
	}
}

// TestAPIWrites checks the REST client's request hook counts writes by verb and
// kind, and neither reads nor the latency it also observes.
func TestAPIWrites(t *testing.T) {
	reg := prometheus.NewRegistry()
	writes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: APIWritesTotal}, []string{LabelVerb, LabelKind})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: RESTClientRequestDurationSeconds}, []string{"verb", "host"})
	reg.MustRegister(writes, latency)
	hook := requestLatencyAdapter{latencyAdapter{latency}, writes}
	ctx := context.Background()
	for _, r := range []struct{ method, path string }{
		{"PATCH", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets/{name}"},
		{"PATCH", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets/{name}"},
		{"POST", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"},
		{"DELETE", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets/{name}"},
		{"PUT", "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/finalizers"},
		{"POST", "/apis/authentication.k8s.io/v1/tokenreviews"},
		{"GET", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets/{name}"},
	} {
		hook.Observe(ctx, r.method, url.URL{Host: "apiserver:6443", Path: r.path}, time.Millisecond)
	}
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != APIWritesTotal {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			got[labels[LabelVerb]+" "+labels[LabelKind]] = m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{"patch JobSet": 2, "create JobSet": 1, "delete JobSet": 1, "update TrainJob": 1, "create other": 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s (-want,+got):\n%s", APIWritesTotal, diff)
	}
	if n := testutil.CollectAndCount(latency); n != 5 {
		t.Errorf("latency children = %d, want 5 (every request observed, one child per method)", n)
	}
}
