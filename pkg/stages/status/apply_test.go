package status_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	jobsetclient "sigs.k8s.io/jobset/client-go/clientset/versioned"

	"github.com/trainyard/trainyard/pkg/stages/status"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// RESTJobSetApply sends one server-side apply PATCH to the JobSet's URL with the field
// manager and force, the body as given, and returns the API server's error; the
// response body is not decoded (a body that is not a JobSet is no error).
func TestRESTJobSetApply(t *testing.T) {
	var got struct {
		method, path, contentType, body string
		query                           map[string][]string
	}
	status422 := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		got.method, got.path, got.contentType, got.body, got.query = r.Method, r.URL.Path, r.Header.Get("Content-Type"), string(data), r.URL.Query()
		w.Header().Set("Content-Type", "application/json")
		if status422 {
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"spec.replicatedJobs: Invalid value","reason":"Invalid","code":422}`)
			return
		}
		_, _ = io.WriteString(w, `not a JobSet, and never decoded`)
	}))
	defer srv.Close()
	client, err := jobsetclient.NewForConfig(&rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	apply := status.RESTJobSetApply(client.JobsetV1alpha2().RESTClient())

	body := `{"apiVersion":"jobset.x-k8s.io/v1alpha2","kind":"JobSet","metadata":{"name":"llm","namespace":"team-a"}}`
	if err := apply(context.Background(), "team-a", "llm", []byte(body)); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if got.method != http.MethodPatch || got.path != "/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-a/jobsets/llm" {
		t.Errorf("request = %s %s", got.method, got.path)
	}
	if got.contentType != string(types.ApplyPatchType) || got.body != body {
		t.Errorf("content type %q, body %q; want %q and the body as given", got.contentType, got.body, types.ApplyPatchType)
	}
	if fm, force := got.query["fieldManager"], got.query["force"]; len(fm) != 1 || fm[0] != trainjob.FieldManager || len(force) != 1 || force[0] != "true" {
		t.Errorf("query = %v, want fieldManager=%s and force=true", got.query, trainjob.FieldManager)
	}

	status422 = true
	err = apply(context.Background(), "team-a", "llm", []byte(body))
	if err == nil || !strings.Contains(err.Error(), "spec.replicatedJobs: Invalid value") {
		t.Errorf("apply of a rejected JobSet = %v, want the API server's error", err)
	}
}
