package dra

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

const (
	ns       = "team-a"
	gpuClass = "gpu.example.com"
	nicClass = "rdma.example.com"
	rtRef    = "TrainingRuntime/torch"
)

// Field path prefixes of the runtime's and of a runtime patch's trainer pod spec.
const (
	runtimePod = "spec.template.spec.replicatedJobs[name=node].template.spec.template.spec"
	patchPod   = "spec.runtimePatches[manager=example.com/dra].trainingRuntimeSpec.template.spec.replicatedJobs[name=node].template.spec.template.spec"
)

// request is an exactly request of count devices of class (allocationMode ExactCount).
func request(name, class string, count int64) resourcev1.DeviceRequest {
	return resourcev1.DeviceRequest{Name: name, Exactly: &resourcev1.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: count}}
}

func allRequest(name, class string) resourcev1.DeviceRequest {
	return resourcev1.DeviceRequest{Name: name, Exactly: &resourcev1.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeAll}}
}

func firstAvailable(name string, subs ...resourcev1.DeviceSubRequest) resourcev1.DeviceRequest {
	return resourcev1.DeviceRequest{Name: name, FirstAvailable: subs}
}

func sub(name, class string, count int64) resourcev1.DeviceSubRequest {
	return resourcev1.DeviceSubRequest{Name: name, DeviceClassName: class,
		AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: count}
}

func template(name string, requests ...resourcev1.DeviceRequest) *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{
			Devices: resourcev1.DeviceClaim{Requests: requests}}}}
}

func claim(name string, requests ...resourcev1.DeviceRequest) *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: requests}}}
}

func deviceClass(name string) *resourcev1.DeviceClass {
	return &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func fromTemplate(name, tmpl string) corev1.PodResourceClaim {
	return corev1.PodResourceClaim{Name: name, ResourceClaimTemplateName: ptr.To(tmpl)}
}

func fromClaim(name, c string) corev1.PodResourceClaim {
	return corev1.PodResourceClaim{Name: name, ResourceClaimName: ptr.To(c)}
}

// uses is a container resources.claims list; "claim/request" names one request.
func uses(refs ...string) []corev1.ResourceClaim {
	out := make([]corev1.ResourceClaim, 0, len(refs))
	for _, r := range refs {
		name, req, _ := cut(r)
		out = append(out, corev1.ResourceClaim{Name: name, Request: req})
	}
	return out
}

func cut(s string) (string, string, bool) {
	for i := range s {
		if s[i] == '/' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// pod is the trainer pod spec of the test plans: container "node" (PET_NPROC_PER_NODE
// as the ML policy left it) using nodeClaims, plus an init container.
type pod struct {
	claims     []corev1.PodResourceClaim
	nodeClaims []corev1.ResourceClaim
	initClaims []corev1.ResourceClaim
}

func testPlan(pd pod, mlPolicy *trainer.MLPolicy) *plan.Plan {
	return &plan.Plan{
		Runtime: plan.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "torch",
			Spec: &trainer.TrainingRuntimeSpec{MLPolicy: mlPolicy}},
		JobSet: &jobsetv1alpha2.JobSet{Spec: jobsetv1alpha2.JobSetSpec{ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{
			{Name: "launcher", Template: jobTemplate("", corev1.PodSpec{Containers: []corev1.Container{
				{Name: "launcher", Env: []corev1.EnvVar{{Name: envPETNProcPerNode, Value: "auto"}}},
				{Name: "sidecar"},
			}})},
			{Name: "node", Template: jobTemplate(trainer.AncestorTrainer, corev1.PodSpec{
				ResourceClaims: pd.claims,
				InitContainers: []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Claims: pd.initClaims}}},
				Containers: []corev1.Container{{Name: trainer.ContainerNode,
					Env:       []corev1.EnvVar{{Name: envPETNProcPerNode, Value: "auto"}},
					Resources: corev1.ResourceRequirements{Claims: pd.nodeClaims}}},
			})},
		}}},
	}
}

func jobTemplate(ancestor string, spec corev1.PodSpec) (t batchv1.JobTemplateSpec) {
	if ancestor != "" {
		t.Labels = map[string]string{trainer.LabelTrainJobAncestor: ancestor}
	}
	t.Spec.Template.Spec = spec
	return t
}

func torch() *trainer.MLPolicy {
	return &trainer.MLPolicy{MLPolicySource: trainer.MLPolicySource{Torch: &trainer.TorchMLPolicySource{}}}
}

func testTrainJob(numProcPerNode *int32, patches ...trainer.RuntimePatch) *trainer.TrainJob {
	tj := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: ns},
		Spec: trainer.TrainJobSpec{RuntimePatches: patches}}
	if numProcPerNode != nil {
		tj.Spec.Trainer = &trainer.Trainer{NumProcPerNode: numProcPerNode}
	}
	return tj
}

// patchClaims is a runtime patch adding pod claims and node container claim uses to
// the trainer replicatedJob.
func patchClaims(claims []corev1.PodResourceClaim, nodeUses []corev1.ResourceClaim) trainer.RuntimePatch {
	ps := &trainer.PodSpecPatch{ResourceClaims: claims}
	if nodeUses != nil {
		ps.Containers = []trainer.ContainerPatch{{Name: trainer.ContainerNode, Resources: &corev1.ResourceRequirements{Claims: nodeUses}}}
	}
	return trainer.RuntimePatch{Manager: "example.com/dra", TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{
		Template: &trainer.JobSetTemplatePatch{Spec: &trainer.JobSetSpecPatch{ReplicatedJobs: []trainer.ReplicatedJobPatch{{
			Name: "node", Template: &trainer.JobTemplatePatch{Spec: &trainer.JobSpecPatch{
				Template: &trainer.PodTemplatePatch{Spec: ps}}}}}}}}}
}

// newClaims returns a Claims whose listers hold objs and whose recorder buffers events.
func newClaims(t *testing.T, objs ...runtime.Object) (*Claims, *events.FakeRecorder) {
	t.Helper()
	index := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	templates, claims, classes, slices := index(), index(), index(), index()
	for _, o := range objs {
		var err error
		switch o.(type) {
		case *resourcev1.ResourceClaimTemplate:
			err = templates.Add(o)
		case *resourcev1.ResourceClaim:
			err = claims.Add(o)
		case *resourcev1.DeviceClass:
			err = classes.Add(o)
		case *resourcev1.ResourceSlice:
			err = slices.Add(o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	rec := events.NewFakeRecorder(10)
	c := &Claims{Recorder: rec}
	l := &Listers{
		Templates:      resourcelisters.NewResourceClaimTemplateLister(templates),
		ResourceClaims: resourcelisters.NewResourceClaimLister(claims),
		DeviceClasses:  resourcelisters.NewDeviceClassLister(classes),
	}
	if len(slices.List()) > 0 { // the capacity check runs only when slices are given
		l.ResourceSlices = resourcelisters.NewResourceSliceLister(slices)
	}
	c.SetListers(l)
	return c, rec
}

func drain(rec *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func TestValidate(t *testing.T) {
	objects := []runtime.Object{
		template("two-gpus", request("gpus", gpuClass, 2)),
		template("bad-class", request("gpus", "missing.example.com", 1)),
		template("bad-alternative", firstAvailable("gpus", sub("big", gpuClass, 2), sub("small", "missing.example.com", 1))),
		claim("shared-fs"),
		deviceClass(gpuClass),
	}
	cases := map[string]struct {
		pod     pod
		patches []trainer.RuntimePatch
		want    error
	}{
		"no claims": {},
		"template and shared claim that exist": {
			pod: pod{claims: []corev1.PodResourceClaim{fromTemplate("gpus", "two-gpus"), fromClaim("fs", "shared-fs")},
				nodeClaims: uses("gpus", "fs"), initClaims: uses("fs")},
		},
		"both names set": {
			pod: pod{claims: []corev1.PodResourceClaim{{Name: "gpus",
				ResourceClaimName: ptr.To("shared-fs"), ResourceClaimTemplateName: ptr.To("two-gpus")}}},
			want: &plan.InvalidInputError{Object: rtRef, Field: runtimePod + ".resourceClaims[name=gpus]",
				Message: "sets both resourceClaimName and resourceClaimTemplateName; set exactly one: resourceClaimTemplateName " +
					"for a ResourceClaim per pod (per-node devices), or resourceClaimName to share one existing ResourceClaim"},
		},
		"neither name set, from a runtime patch": {
			pod:     pod{claims: []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ptr.To("")}}},
			patches: []trainer.RuntimePatch{patchClaims([]corev1.PodResourceClaim{{Name: "gpus"}}, nil)},
			want: &plan.InvalidInputError{Field: patchPod + ".resourceClaims[name=gpus]",
				Message: "sets neither resourceClaimName nor resourceClaimTemplateName; set exactly one: resourceClaimTemplateName " +
					"for a ResourceClaim per pod (per-node devices), or resourceClaimName to share one existing ResourceClaim"},
		},
		"container uses an undeclared claim, from a runtime patch": {
			pod:     pod{claims: []corev1.PodResourceClaim{fromTemplate("gpus", "two-gpus")}, nodeClaims: uses("gpu")},
			patches: []trainer.RuntimePatch{patchClaims(nil, uses("gpu"))},
			want: &plan.InvalidInputError{Field: patchPod + ".containers[name=node].resources.claims[name=gpu]",
				Message: `container "node" uses claim "gpu", but the pod has no resourceClaims entry of that name (pod claims: [gpus]); ` +
					"add it to the pod's resourceClaims (PodSpecPatch.resourceClaims in a runtime patch) or use one of the pod's claims"},
		},
		"init container uses an undeclared claim": {
			pod: pod{initClaims: uses("fs")},
			want: &plan.InvalidInputError{Object: rtRef, Field: runtimePod + ".initContainers[name=init].resources.claims[name=fs]",
				Message: `container "init" uses claim "fs", but the pod has no resourceClaims entry of that name (pod claims: []); ` +
					"add it to the pod's resourceClaims (PodSpecPatch.resourceClaims in a runtime patch) or use one of the pod's claims"},
		},
		"template not found": {
			pod:     pod{claims: []corev1.PodResourceClaim{fromTemplate("gpus", "eight-gpus")}, nodeClaims: uses("gpus")},
			patches: []trainer.RuntimePatch{patchClaims([]corev1.PodResourceClaim{fromTemplate("gpus", "eight-gpus")}, uses("gpus"))},
			want: &plan.InvalidInputError{Field: patchPod + ".resourceClaims[name=gpus].resourceClaimTemplateName",
				Message: `ResourceClaimTemplate "eight-gpus" not found in namespace "team-a"; create it (the TrainJob proceeds ` +
					"by itself when it appears) or name an existing ResourceClaimTemplate"},
		},
		"shared claim not found": {
			pod: pod{claims: []corev1.PodResourceClaim{fromClaim("fs", "datasets")}},
			want: &plan.InvalidInputError{Object: rtRef, Field: runtimePod + ".resourceClaims[name=fs].resourceClaimName",
				Message: `ResourceClaim "datasets" not found in namespace "team-a"; create it (the TrainJob proceeds ` +
					"by itself when it appears) or name an existing ResourceClaim"},
		},
		"device class not found": {
			pod: pod{claims: []corev1.PodResourceClaim{fromTemplate("gpus", "bad-class")}},
			want: &plan.InvalidInputError{Object: "ResourceClaimTemplate/bad-class",
				Field: "spec.spec.devices.requests[name=gpus].exactly.deviceClassName",
				Message: `DeviceClass "missing.example.com" not found; install the DRA driver that provides it or name an ` +
					"existing DeviceClass (the TrainJob proceeds by itself when it appears)"},
		},
		"device class of a firstAvailable alternative not found": {
			pod: pod{claims: []corev1.PodResourceClaim{fromTemplate("gpus", "bad-alternative")}},
			want: &plan.InvalidInputError{Object: "ResourceClaimTemplate/bad-alternative",
				Field: "spec.spec.devices.requests[name=gpus].firstAvailable[name=small].deviceClassName",
				Message: `DeviceClass "missing.example.com" not found; install the DRA driver that provides it or name an ` +
					"existing DeviceClass (the TrainJob proceeds by itself when it appears)"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c, _ := newClaims(t, objects...)
			err := c.Step()(context.Background(), testTrainJob(nil, tc.patches...), testPlan(tc.pod, nil))
			if diff := cmp.Diff(tc.want, err); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if err != nil && !plan.IsInputError(err) {
				t.Errorf("error %v is not an input error", err)
			}
		})
	}
}

// TestWithoutDRAAPI: without resource.k8s.io/v1 (nil listers) claims are unsupported,
// and a TrainJob without claims passes.
func TestWithoutDRAAPI(t *testing.T) {
	c := &Claims{}
	withClaims := testPlan(pod{claims: []corev1.PodResourceClaim{fromTemplate("gpus", "two-gpus")}}, torch())
	var unsupported *plan.UnsupportedError
	if err := c.Step()(context.Background(), testTrainJob(nil), withClaims); !errors.As(err, &unsupported) {
		t.Errorf("claims without the DRA API: error %v, want *plan.UnsupportedError", err)
	}
	if err := c.Step()(context.Background(), testTrainJob(nil), testPlan(pod{}, torch())); err != nil {
		t.Errorf("no claims without the DRA API: error %v, want nil", err)
	}
}

func TestProcsPerNode(t *testing.T) {
	objects := []runtime.Object{
		deviceClass(gpuClass), deviceClass(nicClass), deviceClass("accel.example.com"),
		template("two-gpus", request("gpus", gpuClass, 2)),
		template("mixed", request("big", gpuClass, 4), request("small", gpuClass, 1), request("nics", nicClass, 8)),
		template("nics", request("nics", nicClass, 2)),
		template("all-gpus", allRequest("gpus", gpuClass)),
		template("one-gpu", request("gpus", gpuClass, 0)), // count defaults to 1
		template("accel", request("accel", "accel.example.com", 4)),
		template("either-two", firstAvailable("gpus", sub("a100", gpuClass, 2), sub("h100", gpuClass, 2))),
		template("either-or", firstAvailable("gpus", sub("many", gpuClass, 4), sub("few", gpuClass, 2))),
		claim("shared-gpus", request("gpus", gpuClass, 8)),
		claim("shared-nics", request("nics", nicClass, 1)),
	}
	trainerUses := func(claims []corev1.PodResourceClaim, refs ...string) pod {
		return pod{claims: claims, nodeClaims: uses(refs...)}
	}
	withInjection := torch()
	withInjection.Torch.EnvInjection = &trainer.EnvInjection{Targets: []trainer.EnvInjectionTarget{
		{JobName: "launcher", ContainerNames: []string{"launcher", "sidecar"}}}}

	cases := map[string]struct {
		pod            pod
		mlPolicy       *trainer.MLPolicy
		numProcPerNode *int32
		isGPUClass     func(string) bool
		want           string // the trainer's PET_NPROC_PER_NODE
		wantLauncher   string // envInjection target "launcher"; "" means as the ML policy left it
		wantEvents     []string
		// wantCondition is a fragment of the ProcsPerNodeDerived=False message the plan
		// carries; "" means no condition.
		wantCondition string
	}{
		"one template, count 2": {
			pod:        trainerUses([]corev1.PodResourceClaim{fromTemplate("gpus", "two-gpus")}, "gpus"),
			want:       "2",
			wantEvents: []string{`Normal ProcsPerNodeFromClaims PET_NPROC_PER_NODE is 2, the GPUs each trainer pod claims through DRA (was "auto")`},
		},
		"several requests, GPU classes only": {
			pod:        trainerUses([]corev1.PodResourceClaim{fromTemplate("devs", "mixed")}, "devs"),
			want:       "5",
			wantEvents: []string{`Normal ProcsPerNodeFromClaims PET_NPROC_PER_NODE is 5, the GPUs each trainer pod claims through DRA (was "auto")`},
		},
		"container names one request": {
			pod:        trainerUses([]corev1.PodResourceClaim{fromTemplate("devs", "mixed")}, "devs/small"),
			want:       "1",
			wantEvents: []string{`Normal ProcsPerNodeFromClaims PET_NPROC_PER_NODE is 1, the GPUs each trainer pod claims through DRA (was "auto")`},
		},
		"several templates, default count": {
			pod: trainerUses([]corev1.PodResourceClaim{fromTemplate("a", "two-gpus"), fromTemplate("b", "one-gpu"),
				fromTemplate("c", "nics")}, "a", "b", "c"),
			want:       "3",
			wantEvents: []string{`Normal ProcsPerNodeFromClaims PET_NPROC_PER_NODE is 3, the GPUs each trainer pod claims through DRA (was "auto")`},
		},
		"claims the trainer container does not use are not counted": {
			pod:           trainerUses([]corev1.PodResourceClaim{fromTemplate("a", "two-gpus"), fromTemplate("b", "nics")}, "b"),
			want:          "auto",
			wantCondition: "request no DeviceClass counted as GPUs (classes [" + nicClass + "]",
		},
		"allocationMode All keeps the ML policy's value": {
			pod:           trainerUses([]corev1.PodResourceClaim{fromTemplate("a", "two-gpus"), fromTemplate("b", "all-gpus")}, "a", "b"),
			want:          "auto",
			wantCondition: `(ResourceClaimTemplate all-gpus request "gpus" asks for all devices of class "gpu.example.com" (allocationMode All))`,
			wantEvents: []string{`Warning ProcsPerNodeNotDerived cannot derive GPUs per node from the trainer's DRA claims ` +
				`(ResourceClaimTemplate all-gpus request "gpus" asks for all devices of class "gpu.example.com" (allocationMode All)); ` +
				`PET_NPROC_PER_NODE stays "auto": set spec.trainer.numProcPerNode`},
		},
		"shared GPU claim keeps the ML policy's value": {
			pod:           trainerUses([]corev1.PodResourceClaim{fromClaim("gpus", "shared-gpus")}, "gpus"),
			want:          "auto",
			wantCondition: `claim "gpus" is the shared ResourceClaim "shared-gpus": its devices are not per node`,
			wantEvents: []string{`Warning ProcsPerNodeNotDerived cannot derive GPUs per node from the trainer's DRA claims ` +
				`(claim "gpus" is the shared ResourceClaim "shared-gpus": its devices are not per node); ` +
				`PET_NPROC_PER_NODE stays "auto": set spec.trainer.numProcPerNode`},
		},
		"shared non-GPU claim is ignored": {
			pod: trainerUses([]corev1.PodResourceClaim{fromClaim("nics", "shared-nics"), fromTemplate("gpus", "two-gpus")},
				"nics", "gpus"),
			want:       "2",
			wantEvents: []string{`Normal ProcsPerNodeFromClaims PET_NPROC_PER_NODE is 2, the GPUs each trainer pod claims through DRA (was "auto")`},
		},
		"firstAvailable alternatives of one count": {
			pod:        trainerUses([]corev1.PodResourceClaim{fromTemplate("gpus", "either-two")}, "gpus"),
			want:       "2",
			wantEvents: []string{`Normal ProcsPerNodeFromClaims PET_NPROC_PER_NODE is 2, the GPUs each trainer pod claims through DRA (was "auto")`},
		},
		"firstAvailable alternatives of different counts": {
			pod:           trainerUses([]corev1.PodResourceClaim{fromTemplate("gpus", "either-or")}, "gpus"),
			want:          "auto",
			wantCondition: "firstAvailable alternatives of different GPU counts",
			wantEvents: []string{`Warning ProcsPerNodeNotDerived cannot derive GPUs per node from the trainer's DRA claims ` +
				`(ResourceClaimTemplate either-or request "gpus" has firstAvailable alternatives of different GPU counts); ` +
				`PET_NPROC_PER_NODE stays "auto": set spec.trainer.numProcPerNode`},
		},
		"no GPU class": {
			pod:           trainerUses([]corev1.PodResourceClaim{fromTemplate("nics", "nics"), fromTemplate("accel", "accel")}, "nics", "accel"),
			want:          "auto",
			wantCondition: "request no DeviceClass counted as GPUs (classes [" + nicClass + " accel.example.com]",
		},
		"configured GPU class predicate": {
			pod:        trainerUses([]corev1.PodResourceClaim{fromTemplate("gpus", "two-gpus"), fromTemplate("accel", "accel")}, "gpus", "accel"),
			isGPUClass: func(class string) bool { return class == "accel.example.com" },
			want:       "4",
			wantEvents: []string{`Normal ProcsPerNodeFromClaims PET_NPROC_PER_NODE is 4, the GPUs each trainer pod claims through DRA (was "auto")`},
		},
		"numProcPerNode set: untouched": {
			pod:            trainerUses([]corev1.PodResourceClaim{fromTemplate("gpus", "two-gpus")}, "gpus"),
			numProcPerNode: ptr.To[int32](3),
			want:           "auto", // the test plan's value: the ML policy wrote 3 in a real pipeline
		},
		"not torch: untouched": {
			pod:      trainerUses([]corev1.PodResourceClaim{fromTemplate("gpus", "two-gpus")}, "gpus"),
			mlPolicy: &trainer.MLPolicy{},
			want:     "auto",
		},
		"envInjection targets that carry the variable follow": {
			pod:          trainerUses([]corev1.PodResourceClaim{fromTemplate("gpus", "two-gpus")}, "gpus"),
			mlPolicy:     withInjection,
			want:         "2",
			wantLauncher: "2",
			wantEvents:   []string{`Normal ProcsPerNodeFromClaims PET_NPROC_PER_NODE is 2, the GPUs each trainer pod claims through DRA (was "auto")`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c, rec := newClaims(t, objects...)
			c.IsGPUClass = tc.isGPUClass
			mlPolicy := tc.mlPolicy
			if mlPolicy == nil {
				mlPolicy = torch()
			}
			p := testPlan(tc.pod, mlPolicy)
			if err := c.Step()(context.Background(), testTrainJob(tc.numProcPerNode), p); err != nil {
				t.Fatalf("step: %v", err)
			}
			launcher := plan.PodSpec(plan.ReplicatedJob(p.JobSet, "launcher"))
			wantLauncher := tc.wantLauncher
			if wantLauncher == "" {
				wantLauncher = "auto"
			}
			got := map[string][]corev1.EnvVar{
				"node":     plan.PodSpec(plan.TrainerJob(p.JobSet)).Containers[0].Env,
				"launcher": launcher.Containers[0].Env,
				"sidecar":  launcher.Containers[1].Env,
			}
			want := map[string][]corev1.EnvVar{
				"node":     {{Name: envPETNProcPerNode, Value: tc.want}},
				"launcher": {{Name: envPETNProcPerNode, Value: wantLauncher}},
				"sidecar":  nil, // the ML policy gave it nothing: not added
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantEvents, drain(rec)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			var messages []string
			for _, c := range p.Conditions {
				if c.Type != trainjob.ConditionProcsPerNodeDerived || c.Status != metav1.ConditionFalse || c.Reason != trainjob.ReasonDeviceCountUnknown {
					t.Errorf("plan condition %+v, want only ProcsPerNodeDerived=False/%s", c, trainjob.ReasonDeviceCountUnknown)
				}
				messages = append(messages, c.Message)
			}
			switch {
			case tc.wantCondition == "" && len(messages) > 0:
				t.Errorf("plan conditions %q, want none", messages)
			case tc.wantCondition != "" && (len(messages) != 1 || !strings.Contains(messages[0], tc.wantCondition) ||
				!strings.Contains(messages[0], "spec.trainer.numProcPerNode")):
				t.Errorf("plan conditions %q, want one naming %q and spec.trainer.numProcPerNode", messages, tc.wantCondition)
			}
		})
	}
}

// TestProcsPerNodeWarningHeals: a TrainJob warned before (ProcsPerNodeDerived=False)
// whose count is now known gets the condition turned True with the JobSet.
func TestProcsPerNodeWarningHeals(t *testing.T) {
	c, _ := newClaims(t, deviceClass(gpuClass), template("two-gpus", request("gpus", gpuClass, 2)))
	tj := testTrainJob(nil)
	tj.Status.Conditions = []metav1.Condition{{Type: trainjob.ConditionProcsPerNodeDerived, Status: metav1.ConditionFalse, Reason: trainjob.ReasonDeviceCountUnknown}}
	p := testPlan(pod{claims: []corev1.PodResourceClaim{fromTemplate("gpus", "two-gpus")}, nodeClaims: uses("gpus")}, torch())
	if err := c.Step()(context.Background(), tj, p); err != nil {
		t.Fatal(err)
	}
	if len(p.Conditions) != 1 || p.Conditions[0].Type != trainjob.ConditionProcsPerNodeDerived || p.Conditions[0].Status != metav1.ConditionTrue {
		t.Errorf("plan conditions %+v, want ProcsPerNodeDerived=True", p.Conditions)
	}
}

func TestDefaultIsGPUClass(t *testing.T) {
	got := map[string]bool{}
	for _, class := range []string{"gpu.nvidia.com", "GPU.example", "gpu.trainyard.dev", "rdma.example.com", "neuron.amazonaws.com"} {
		got[class] = DefaultIsGPUClass(class)
	}
	want := map[string]bool{"gpu.nvidia.com": true, "GPU.example": true, "gpu.trainyard.dev": true,
		"rdma.example.com": false, "neuron.amazonaws.com": false}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DefaultIsGPUClass (-want +got):\n%s", diff)
	}
}
