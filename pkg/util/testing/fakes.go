package testing

import (
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
)

// Writes returns the actions of a fake clientset that are not reads (get, list, watch),
// each as "verb resource" or "verb resource/subresource", in order: what a stage wrote.
func Writes(actions []clienttesting.Action) []string {
	var out []string
	for _, a := range actions {
		switch a.GetVerb() {
		case "get", "list", "watch":
			continue
		}
		s := a.GetVerb() + " " + a.GetResource().Resource
		if sub := a.GetSubresource(); sub != "" {
			s += "/" + sub
		}
		out = append(out, s)
	}
	return out
}

// Patches returns the patch actions among actions, in order.
func Patches(actions []clienttesting.Action) []clienttesting.PatchAction {
	var out []clienttesting.PatchAction
	for _, a := range actions {
		if p, ok := a.(clienttesting.PatchAction); ok {
			out = append(out, p)
		}
	}
	return out
}

// Events drains the events a FakeRecorder buffered ("<type> <reason> <note>"), without
// blocking.
func Events(r *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}
