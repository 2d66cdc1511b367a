package stages

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/tools/events"
	jobsetfake "sigs.k8s.io/jobset/client-go/clientset/versioned/fake"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	trainerfake "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned/fake"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/informers"
	"github.com/trainyard/trainyard/pkg/stages/dra"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/status"
	"github.com/trainyard/trainyard/pkg/stages/statuswriter"
	"github.com/trainyard/trainyard/pkg/stages/step"
)

// TestTableMatchesConfiguration: the table and the configuration file's stages list the
// same stages in the same order, so a stage added to one but not the other fails here.
func TestTableMatchesConfiguration(t *testing.T) {
	var fields []string
	typ := reflect.TypeFor[configv1alpha1.StagesConfiguration]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		fields = append(fields, name)
	}
	var rows []string
	for _, s := range All() {
		rows = append(rows, s.ConfigField())
	}
	if !slices.Equal(rows, fields) {
		t.Errorf("the table's configuration fields = %v, want StagesConfiguration's fields in order %v", rows, fields)
	}
}

func TestTableRows(t *testing.T) {
	seen := map[string]bool{}
	for i, s := range All() {
		if s.Name == "" || seen[s.Name] {
			t.Errorf("row %d: name %q is empty or taken", i, s.Name)
		}
		seen[s.Name] = true
		if (s.Step == nil) == (s.New == nil) {
			t.Errorf("stage %s: want exactly one of Step and New", s.Name)
		}
	}
}

// TestDefaultsSetEveryStage: the defaulted configuration gives every stage of the
// table its workers, the status stage more than the others.
func TestDefaultsSetEveryStage(t *testing.T) {
	cfg := &configv1alpha1.Configuration{}
	configv1alpha1.SetObjectDefaults_Configuration(cfg)
	got := Workers(&cfg.Stages)
	for _, name := range Names() {
		want := configv1alpha1.DefaultStageWorkers
		if name == status.Name {
			want = configv1alpha1.DefaultStatusWorkers
		}
		if got[name] != want {
			t.Errorf("workers of %s = %d, want %d", name, got[name], want)
		}
	}
}

func TestLookup(t *testing.T) {
	s, ok := Lookup("ml_policy")
	if !ok || s.ConfigField() != "mlPolicy" {
		t.Errorf(`Lookup("ml_policy") = %q (field %q), %v; want ml_policy (mlPolicy), true`, s.Name, s.ConfigField(), ok)
	}
	if _, ok := Lookup("mlPolicy"); ok {
		t.Error(`Lookup("mlPolicy") found a stage; stages are named by their queue name`)
	}
}

// TestBuildNamesAndIndexes: the controller's stages come in table order under the
// table's names, the steps at their 1-based position, and the renderer's steps are the
// controller's.
func TestBuildNamesAndIndexes(t *testing.T) {
	inf, err := informers.New(trainerfake.NewSimpleClientset(), jobsetfake.NewSimpleClientset(), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &configv1alpha1.Configuration{}
	configv1alpha1.SetObjectDefaults_Configuration(cfg)
	stepDeps := StepDeps{GangBackends: GangBackends(nil), Claims: &dra.Claims{}}
	built := Build(Deps{StepDeps: stepDeps, Config: cfg, Informers: inf, JobSetAPI: jobsetfake.NewSimpleClientset(),
		Plans: &engine.Plans[plan.Plan]{}, Status: &statuswriter.Writer{}, Recorder: &events.FakeRecorder{}})
	var names []string
	var stepIndexes []int
	for i, s := range built {
		names = append(names, s.Name())
		if st, ok := s.(*step.Stage); ok {
			if st.Index != i+1 {
				t.Errorf("step %s has index %d, want %d", st.Name(), st.Index, i+1)
			}
			stepIndexes = append(stepIndexes, st.Index)
		}
	}
	if !slices.Equal(names, Names()) {
		t.Errorf("built stages = %v, want %v", names, Names())
	}
	var renderIndexes []int
	for _, s := range Steps(stepDeps) {
		renderIndexes = append(renderIndexes, s.Index)
	}
	if !slices.Equal(renderIndexes, stepIndexes) || len(stepIndexes) == 0 {
		t.Errorf("Steps indexes = %v, want the controller's steps %v", renderIndexes, stepIndexes)
	}
	if _, err := engine.New(built, engine.WithWorkers(Workers(&cfg.Stages))); err != nil {
		t.Errorf("engine.New(Build(...), WithWorkers(Workers(...))) = %v", err)
	}
}
