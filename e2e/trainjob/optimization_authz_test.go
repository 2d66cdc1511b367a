package trainjob

import (
	"context"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
)

// TestOptimizationJobNeedsTrainJobCreate (issue 41, finding 8): the controller creates
// trials with its own identity, so the webhook admits an OptimizationJob only from a
// user RBAC lets create TrainJobs in the namespace — asked of the API server with a
// SubjectAccessReview. A user who may create OptimizationJobs but not TrainJobs is
// refused, naming the fix; once a Role grants create on trainjobs the same create
// passes.
func TestOptimizationJobNeedsTrainJobCreate(t *testing.T) {
	e := newEnv(t)
	startController(t, e.c)
	ctx := context.Background()
	kube := kubernetes.NewForConfigOrDie(e.c.RESTConfig())
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "searcher", Namespace: e.ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{trainer.GroupName}, Resources: []string{"optimizationjobs"}, Verbs: []string{"create", "get"}}},
	}
	if _, err := kube.RbacV1().Roles(e.ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "searcher", Namespace: e.ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "searcher"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "alice"}},
	}
	if _, err := kube.RbacV1().RoleBindings(e.ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(e.c.RESTConfig())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "alice", Groups: []string{"system:authenticated"}}
	alice := trainerclient.NewForConfigOrDie(cfg)
	job := &trainer.OptimizationJob{
		ObjectMeta: metav1.ObjectMeta{Name: "digits", Namespace: e.ns},
		Spec: trainer.OptimizationJobSpec{
			Objectives: []trainer.Objective{{Metric: "loss"}},
			Parameters: []trainer.Parameter{{Name: "hidden_size", SearchSpace: trainer.SearchSpace{Categorical: &trainer.CategoricalSpace{Choices: []string{"32", "64"}}}}},
			TrainJobTemplate: trainer.TrainJobTemplateSpec{Spec: trainer.TrainJobSpec{RuntimeRef: trainer.RuntimeRef{
				Name: torchRuntime, APIGroup: ptr.To(trainer.GroupName), Kind: ptr.To(trainer.ClusterTrainingRuntimeKind)}}},
		},
	}

	// RBAC lets alice create the OptimizationJob (the API server's check passes, as the
	// Role takes effect); the webhook refuses it.
	cluster.Eventually(t, 30*time.Second, "the webhook refusing alice's OptimizationJob", func(ctx context.Context) (bool, string) {
		_, err := alice.TrainerV1alpha1().OptimizationJobs(e.ns).Create(ctx, job, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			t.Fatal("alice, who may not create TrainJobs, created an OptimizationJob: its trials would be TrainJobs she may not create")
		}
		msg := err.Error()
		return strings.Contains(msg, "denied the request") && strings.Contains(msg, `"alice" may not create trainjobs.trainer.kubeflow.org in namespace "`+e.ns+`"`), msg
	})

	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{trainer.GroupName}, Resources: []string{"trainjobs"}, Verbs: []string{"create"}})
	if _, err := kube.RbacV1().Roles(e.ns).Update(ctx, role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster.Eventually(t, 30*time.Second, "alice's OptimizationJob admitted once she may create TrainJobs", func(ctx context.Context) (bool, string) {
		_, err := alice.TrainerV1alpha1().OptimizationJobs(e.ns).Create(ctx, job, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}
