package search_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/optimization/search"
)

// loss is the objective of the specs the tests build.
var loss = []trainer.Objective{{Metric: "loss"}}

func uniform(name, lo, hi string, typ trainer.ParameterType) trainer.Parameter {
	return trainer.Parameter{Name: name, SearchSpace: trainer.SearchSpace{Uniform: &trainer.UniformSpace{Min: trainer.Double(lo), Max: trainer.Double(hi), Type: typ}}}
}

func logUniform(name, lo, hi string, typ trainer.ParameterType) trainer.Parameter {
	return trainer.Parameter{Name: name, SearchSpace: trainer.SearchSpace{LogUniform: &trainer.LogUniformSpace{Min: trainer.Double(lo), Max: trainer.Double(hi), Type: typ}}}
}

func categorical(name string, choices ...string) trainer.Parameter {
	return trainer.Parameter{Name: name, SearchSpace: trainer.SearchSpace{Categorical: &trainer.CategoricalSpace{Choices: choices}}}
}

func random(seed *int64, params ...trainer.Parameter) *trainer.OptimizationJobSpec {
	return &trainer.OptimizationJobSpec{Objectives: loss, Parameters: params, SearchAlgorithm: &trainer.SearchAlgorithm{Random: &trainer.RandomAlgorithm{Seed: seed}}}
}

func grid(params ...trainer.Parameter) *trainer.OptimizationJobSpec {
	return &trainer.OptimizationJobSpec{Objectives: loss, Parameters: params, SearchAlgorithm: &trainer.SearchAlgorithm{Grid: &trainer.GridAlgorithm{}}}
}

func mustNew(t *testing.T, spec *trainer.OptimizationJobSpec, seed int64) *search.Search {
	t.Helper()
	s, err := search.New(spec, seed)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// values returns parameter p's value in n trials.
func values(t *testing.T, s *search.Search, p, n int) []string {
	t.Helper()
	out := make([]string, n)
	for i := range n {
		a, err := s.Assignment(i)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = a[p].Value
	}
	return out
}

func floats(t *testing.T, vs []string) []float64 {
	t.Helper()
	out := make([]float64, len(vs))
	for i, v := range vs {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("value %q does not parse: %v", v, err)
		}
		out[i] = f
	}
	return out
}

// TestRandomIsReproducible: the same seed gives the same trials, whatever order they
// are asked in (a restart mid-search asks for the next index only); another seed,
// others; no seed in the spec takes the controller's.
func TestRandomIsReproducible(t *testing.T) {
	spec := random(ptr.To[int64](42), logUniform("lr", "0.0001", "0.1", ""), categorical("hidden", "32", "64", "128"))
	a, b := mustNew(t, spec, 1), mustNew(t, spec, 2) // the spec's seed wins over either
	seventh, _ := b.Assignment(7)
	if diff := cmp.Diff(values(t, a, 0, 8)[7], seventh[0].Value); diff != "" {
		t.Errorf("trial 7 asked alone differs from trial 7 after 0..6:\n%s", diff)
	}
	if diff := cmp.Diff(values(t, a, 0, 20), values(t, b, 0, 20)); diff != "" {
		t.Errorf("one seed, two searches, different trials:\n%s", diff)
	}
	other := mustNew(t, random(ptr.To[int64](43), spec.Parameters...), 1)
	if cmp.Equal(values(t, a, 0, 20), values(t, other, 0, 20)) {
		t.Error("seeds 42 and 43 gave the same 20 trials")
	}
	unseeded := random(nil, spec.Parameters...)
	if cmp.Equal(values(t, mustNew(t, unseeded, 1), 0, 20), values(t, mustNew(t, unseeded, 2), 0, 20)) {
		t.Error("without a seed in the spec, two controller seeds gave the same trials")
	}
}

// TestUniformStaysInBoundsAndSpreads: 2,000 draws of uniform [-1, 3] all lie in the
// range, and each quarter of it gets its share (a loose bound: 500 ± 100).
func TestUniformStaysInBoundsAndSpreads(t *testing.T) {
	s := mustNew(t, random(ptr.To[int64](7), uniform("x", "-1", "3", trainer.ParameterTypeFloat)), 0)
	quarters := make([]int, 4)
	for _, v := range floats(t, values(t, s, 0, 2000)) {
		if v < -1 || v > 3 {
			t.Fatalf("value %v outside [-1, 3]", v)
		}
		quarters[min(3, int(v+1))]++
	}
	for q, n := range quarters {
		if n < 400 || n > 600 {
			t.Errorf("quarter %d of the range got %d of 2,000 draws, want about 500: %v", q, n, quarters)
		}
	}
}

// TestLogUniformIsUniformInTheLogarithm: draws of log-uniform [1e-4, 1] fall evenly
// into its four decades (500 ± 100 of 2,000); a uniform draw would put ~90% in the
// last.
func TestLogUniformIsUniformInTheLogarithm(t *testing.T) {
	s := mustNew(t, random(ptr.To[int64](7), logUniform("lr", "1e-4", "1", trainer.ParameterTypeFloat)), 0)
	decades := make([]int, 4)
	for _, v := range floats(t, values(t, s, 0, 2000)) {
		if v < 1e-4 || v > 1 {
			t.Fatalf("value %v outside [1e-4, 1]", v)
		}
		decades[min(3, int(math.Log10(v)+4))]++
	}
	for d, n := range decades {
		if n < 400 || n > 600 {
			t.Errorf("decade %d got %d of 2,000 draws, want about 500: %v", d, n, decades)
		}
	}
}

// TestIntRounds: Int values are integers within [ceil(min), floor(max)], every one of
// them drawn, for uniform and log-uniform.
func TestIntRounds(t *testing.T) {
	for name, p := range map[string]trainer.Parameter{
		"uniform":     uniform("n", "0.5", "4.5", trainer.ParameterTypeInt),
		"log-uniform": logUniform("n", "0.5", "4.5", trainer.ParameterTypeInt),
	} {
		t.Run(name, func(t *testing.T) {
			s := mustNew(t, random(ptr.To[int64](3), p), 0)
			seen := map[string]int{}
			for _, v := range values(t, s, 0, 1000) {
				seen[v]++
			}
			for v := range seen {
				if n, err := strconv.Atoi(v); err != nil || n < 1 || n > 4 {
					t.Errorf("value %q is not an integer in [1, 4]", v)
				}
			}
			if len(seen) != 4 {
				t.Errorf("values drawn %v, want each of 1, 2, 3, 4", seen)
			}
		})
	}
}

// TestCategoricalDrawsEveryChoice evenly (1,000 ± 150 of 3,000 each).
func TestCategoricalDrawsEveryChoice(t *testing.T) {
	s := mustNew(t, random(ptr.To[int64](9), categorical("opt", "sgd", "adam", "adamw")), 0)
	seen := map[string]int{}
	for _, v := range values(t, s, 0, 3000) {
		seen[v]++
	}
	for _, c := range []string{"sgd", "adam", "adamw"} {
		if seen[c] < 850 || seen[c] > 1150 {
			t.Errorf("choice %q drawn %d of 3,000 times, want about 1,000: %v", c, seen[c], seen)
		}
	}
}

// TestGridOrder: every combination once, in the spread order (gridAssignment); then
// ErrExhausted.
func TestGridOrder(t *testing.T) {
	s := mustNew(t, grid(categorical("hidden", "32", "64"), categorical("opt", "sgd", "adam", "adamw")), 0)
	if s.Size() != 6 {
		t.Fatalf("Size = %d, want 6", s.Size())
	}
	var got []string
	for i := range 6 {
		a, err := s.Assignment(i)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, a[0].Value+"/"+a[1].Value)
	}
	want := []string{"32/sgd", "64/adam", "32/adamw", "64/sgd", "32/adam", "64/adamw"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("grid order (-want +got):\n%s", diff)
	}
	if _, err := s.Assignment(6); !errors.Is(err, search.ErrExhausted) {
		t.Errorf("Assignment(6) error %v, want ErrExhausted", err)
	}
}

// TestGridSpreadsEveryParameterEarly (issue 42, item 2): for grids of several shapes,
// the order visits every combination exactly once, each parameter takes all of its
// choices within its first choice-count trials, and in every prefix each parameter's
// choices are used evenly (counts differing by at most 2), so a numTrials below the
// grid's size runs a spread of it. The odometer order it replaces fails this: with
// hidden × opt, the first 3 trials all had hidden 32.
func TestGridSpreadsEveryParameterEarly(t *testing.T) {
	choices := func(name string, n int) trainer.Parameter {
		c := make([]string, n)
		for i := range c {
			c[i] = strconv.Itoa(i)
		}
		return categorical(name, c...)
	}
	for _, shape := range [][]int{{2, 3}, {3, 3}, {2, 2, 3}, {4, 6}, {3, 1, 5}, {5, 4, 2, 3}, {1}, {7}} {
		t.Run(fmt.Sprint(shape), func(t *testing.T) {
			var params []trainer.Parameter
			size := 1
			for j, n := range shape {
				params = append(params, choices(fmt.Sprintf("p%d", j), n))
				size *= n
			}
			s := mustNew(t, grid(params...), 0)
			seen := map[string]int{}
			counts := make([]map[string]int, len(shape))
			for j := range counts {
				counts[j] = map[string]int{}
			}
			for i := range size {
				a, err := s.Assignment(i)
				if err != nil {
					t.Fatal(err)
				}
				var key []string
				for j, v := range a {
					key = append(key, v.Value)
					counts[j][v.Value]++
					if i+1 == shape[j] && len(counts[j]) != shape[j] {
						t.Errorf("parameter %d: %d of its %d choices in the first %d trials", j, len(counts[j]), shape[j], i+1)
					}
					lo, hi := size, 0
					for c := range shape[j] {
						n := counts[j][strconv.Itoa(c)]
						lo, hi = min(lo, n), max(hi, n)
					}
					if hi-lo > 2 {
						t.Errorf("after %d trials parameter %d's choices are used %d to %d times: %v", i+1, j, lo, hi, counts[j])
					}
				}
				if prev, ok := seen[strings.Join(key, "/")]; ok {
					t.Fatalf("trials %d and %d both run %v", prev, i, key)
				}
				seen[strings.Join(key, "/")] = i
			}
			if len(seen) != size {
				t.Errorf("%d distinct combinations, want %d", len(seen), size)
			}
		})
	}
}

// TestRandomDiscreteWithoutReplacement (issue 42, item 3): a random search repeats no
// combination of its discrete parameters until every one has run, then takes them all
// again in another order: over one categorical, a categorical × uniform Int space, and
// the discrete part of examples/digits-search (log-uniform lr, hidden_size of 4 choices:
// seed 42, 8 trials gave hidden_size [128 128 64 32 64 128 16 32] before), whose lr is
// still drawn on its own.
func TestRandomDiscreteWithoutReplacement(t *testing.T) {
	for _, seed := range []int64{42, 0, 1, -7, 1 << 40} {
		s := mustNew(t, random(ptr.To(seed), categorical("batch", "16", "32", "64", "128")), 0)
		digits := mustNew(t, random(ptr.To(seed), logUniform("lr", "0.001", "0.5", ""), categorical("hidden_size", "16", "32", "64", "128")), 0)
		if lrs := values(t, digits, 0, 8); len(slices.Compact(slices.Sorted(slices.Values(lrs)))) != 8 {
			t.Errorf("seed %d: lr %v, want 8 independent draws", seed, lrs)
		}
		for _, got := range [][]string{values(t, s, 0, 8), values(t, digits, 1, 8)} {
			for _, half := range [][]string{got[:4], got[4:]} {
				if sorted := slices.Sorted(slices.Values(half)); !slices.Equal(sorted, []string{"128", "16", "32", "64"}) {
					t.Errorf("seed %d: trials %v; want each choice once in trials 0-3 and again in 4-7", seed, got)
				}
			}
		}
		mixed := mustNew(t, random(ptr.To(seed), categorical("opt", "sgd", "adam", "adamw"), uniform("layers", "0.5", "4", trainer.ParameterTypeInt)), 0)
		seen := map[string]int{}
		for i := range 12 {
			a, err := mixed.Assignment(i)
			if err != nil {
				t.Fatal(err)
			}
			key := a[0].Value + "/" + a[1].Value
			if prev, ok := seen[key]; ok {
				t.Errorf("seed %d: trials %d and %d both run %s", seed, prev, i, key)
			}
			seen[key] = i
			if n, err := strconv.Atoi(a[1].Value); err != nil || n < 1 || n > 4 {
				t.Errorf("layers %q is not an integer in [1, 4]", a[1].Value)
			}
		}
	}
}

// TestRandomDiscreteFirstTrialIsUniform: without replacement, trial 0 over 4,000 seeds
// still takes each of 4 choices about equally often (1,000 ± 150; a binomial's standard
// deviation is 27): the permutation is not biased toward a choice.
func TestRandomDiscreteFirstTrialIsUniform(t *testing.T) {
	seen := map[string]int{}
	for seed := range int64(4000) {
		a, err := mustNew(t, random(ptr.To(seed), categorical("batch", "16", "32", "64", "128")), 0).Assignment(0)
		if err != nil {
			t.Fatal(err)
		}
		seen[a[0].Value]++
	}
	for _, c := range []string{"16", "32", "64", "128"} {
		if seen[c] < 850 || seen[c] > 1150 {
			t.Errorf("choice %s first in %d of 4,000 seeds, want about 1,000: %v", c, seen[c], seen)
		}
	}
}

// TestLogUniformIntBuckets (issue 42, item 3): a log-uniform Int gives each integer k a
// bucket [k − ½, k + ½) of equal width, so over 10,000 draws each integer's share is
// within 0.015 (three standard deviations of a binomial share at p = ½) of
// ln((k+½)/(k−½)) / ln((b+½)/(a−½)). Rounding a draw over [min, max] gave the ends
// half-width buckets: [1, 3] drew 37 % / 47 % / 16 % against 56 % / 26 % / 17 %.
func TestLogUniformIntBuckets(t *testing.T) {
	for _, r := range [][2]int{{1, 3}, {2, 9}, {1, 1000}} {
		t.Run(fmt.Sprint(r), func(t *testing.T) {
			s := mustNew(t, random(ptr.To[int64](5), logUniform("n", strconv.Itoa(r[0]), strconv.Itoa(r[1]), trainer.ParameterTypeInt)), 0)
			const draws = 10000
			seen := map[int]int{}
			for _, v := range values(t, s, 0, draws) {
				n, err := strconv.Atoi(v)
				if err != nil || n < r[0] || n > r[1] {
					t.Fatalf("value %q is not an integer in %v", v, r)
				}
				seen[n]++
			}
			total := math.Log((float64(r[1]) + 0.5) / (float64(r[0]) - 0.5))
			for k := r[0]; k <= min(r[1], r[0]+9); k++ { // the first ten integers: the rest have shares below the tolerance
				want := math.Log((float64(k)+0.5)/(float64(k)-0.5)) / total
				if got := float64(seen[k]) / draws; math.Abs(got-want) > 0.015 {
					t.Errorf("integer %d drawn %.3f of the time, want %.3f ± 0.015", k, got, want)
				}
			}
		})
	}
}

// TestValidateNamesTheFieldAndTheFix on specs the search cannot run.
func TestValidateNamesTheFieldAndTheFix(t *testing.T) {
	for name, tc := range map[string]struct {
		spec *trainer.OptimizationJobSpec
		want []string
	}{
		"unparsable bound":    {random(nil, uniform("x", "1e", "2", "")), []string{"spec.parameters[0].searchSpace.uniform.min", "decimal number"}},
		"min not below max":   {random(nil, uniform("x", "2", "1", "")), []string{"spec.parameters[0].searchSpace.uniform.min", "below max"}},
		"log-uniform from 0":  {random(nil, logUniform("x", "0", "1", "")), []string{"logUniform.min", "above 0"}},
		"no integer in range": {random(nil, uniform("x", "0.2", "0.8", trainer.ParameterTypeInt)), []string{"uniform", "at least one integer"}},
		"grid over a range":   {grid(uniform("x", "0", "1", "")), []string{"spec.parameters[0].searchSpace", "categorical"}},
		"duplicate name":      {random(nil, categorical("x", "a"), categorical("x", "b")), []string{"spec.parameters[1].name", "Duplicate"}},
		"two spaces": {random(nil, trainer.Parameter{Name: "x", SearchSpace: trainer.SearchSpace{
			Categorical: &trainer.CategoricalSpace{Choices: []string{"a"}}, Uniform: &trainer.UniformSpace{Min: "0", Max: "1"}}}), []string{"exactly one"}},
		"NaN bound":         {random(nil, uniform("x", "NaN", "1", "")), []string{"spec.parameters[0].searchSpace.uniform.min", "decimal number"}},
		"hexadecimal bound": {random(nil, logUniform("x", "0x1p-4", "1", "")), []string{"spec.parameters[0].searchSpace.logUniform.min", "decimal number"}},
		"overflowing bound": {random(nil, uniform("x", "0", "1e999", "")), []string{"spec.parameters[0].searchSpace.uniform.max", "float64"}},
		"overflowing width": {random(nil, uniform("x", "-1e308", "1e308", "")), []string{"spec.parameters[0].searchSpace.uniform: Invalid value", "max − min, overflows float64", "narrow the range"}},
		"Int past 2^53":     {random(nil, uniform("x", "0", "1e17", trainer.ParameterTypeInt)), []string{"spec.parameters[0].searchSpace.uniform", "2^53"}},
		"log-uniform Int without an integer": {random(nil, logUniform("x", "0.1", "0.9", trainer.ParameterTypeInt)),
			[]string{"spec.parameters[0].searchSpace.logUniform", "at least one integer"}},
		"no parameters":  {random(nil), []string{"spec.parameters: Required", "at least one parameter"}},
		"unnamed":        {random(nil, categorical("", "a")), []string{"spec.parameters[0].name: Required"}},
		"no choices":     {random(nil, categorical("x")), []string{"spec.parameters[0].searchSpace.categorical.choices: Required"}},
		"colliding envs": {random(nil, categorical("learning-rate", "a"), categorical("learning_rate", "b")), []string{"spec.parameters[1].name", "KUBEFLOW_TRAINER_OPT_LEARNING_RATE", "rename one"}},
		"no objective":   {&trainer.OptimizationJobSpec{Parameters: []trainer.Parameter{categorical("x", "a")}}, []string{"spec.objectives: Required", "metric"}},
		"two objectives": {&trainer.OptimizationJobSpec{Objectives: []trainer.Objective{{Metric: "a"}, {Metric: "b"}}, Parameters: []trainer.Parameter{categorical("x", "a")}}, []string{"spec.objectives: Too many"}},
		"unnamed metric": {&trainer.OptimizationJobSpec{Objectives: []trainer.Objective{{}}, Parameters: []trainer.Parameter{categorical("x", "a")}}, []string{"spec.objectives[0].metric: Required", "e.g. loss"}},
	} {
		t.Run(name, func(t *testing.T) {
			err := search.Validate(tc.spec)
			if err == nil {
				t.Fatal("Validate = nil")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if _, err := search.New(tc.spec, 0); err == nil {
				t.Error("New accepted it")
			}
		})
	}
}

// TestValidateSpecAcceptsTheBoundaries: specs at the edge of each rule run.
func TestValidateSpecAcceptsTheBoundaries(t *testing.T) {
	for name, spec := range map[string]*trainer.OptimizationJobSpec{
		"negative uniform":          random(nil, uniform("x", "-1.5e-3", "0", "")),
		"Int range of one integer":  random(nil, uniform("x", "0.5", "1.5", trainer.ParameterTypeInt)),
		"Int at 2^53":               random(nil, uniform("x", "-9007199254740992", "9007199254740992", trainer.ParameterTypeInt)),
		"log-uniform from 1e-9":     random(nil, logUniform("x", "1e-9", "1", "")),
		"width just within float64": random(nil, uniform("x", "-8e307", "8e307", "")),
		"log-uniform up to 1e308":   random(nil, logUniform("x", "1e-308", "1e308", "")),
		"distinct variables":        grid(categorical("lr", "a"), categorical("lr2", "b")),
	} {
		t.Run(name, func(t *testing.T) {
			if errs := search.ValidateSpec(&trainer.OptimizationJob{Spec: *spec}); len(errs) > 0 {
				t.Errorf("ValidateSpec = %v, want none", errs)
			}
		})
	}
}

// TestLargeIntSpaces: a uniform Int over ±2^53 (permuted: 2^54+1 values) and two of them
// (2^108 combinations, past what is permuted: drawn on their own) give distinct
// integers within the range.
func TestLargeIntSpaces(t *testing.T) {
	wide := uniform("a", "-9007199254740992", "9007199254740992", trainer.ParameterTypeInt)
	other := wide
	other.Name = "b"
	for name, spec := range map[string]*trainer.OptimizationJobSpec{
		"one":  random(ptr.To[int64](1), wide),
		"two":  random(ptr.To[int64](1), wide, other),
		"tiny": random(ptr.To[int64](1), uniform("a", "-1", "1", trainer.ParameterTypeInt), categorical("c", "x")),
	} {
		t.Run(name, func(t *testing.T) {
			s := mustNew(t, spec, 0)
			n := 20
			if name == "tiny" {
				n = 3
			}
			seen := map[string]bool{}
			for _, v := range values(t, s, 0, n) {
				i, err := strconv.ParseInt(v, 10, 64)
				if err != nil || i < -(1<<53) || i > 1<<53 {
					t.Fatalf("value %q is not an integer within ±2^53", v)
				}
				if seen[v] {
					t.Errorf("value %s twice in %d trials", v, n)
				}
				seen[v] = true
			}
		})
	}
}

// TestFailureBudget: the annotation's whole numbers from 1 set a budget counting every
// failure; anything else is an error at the annotation naming the fix; without it, the
// default counts failures until a first success.
func TestFailureBudget(t *testing.T) {
	job := func(v *string) *trainer.OptimizationJob {
		j := &trainer.OptimizationJob{}
		if v != nil {
			j.Annotations = map[string]string{search.AnnotationMaxFailedTrials: *v}
		}
		return j
	}
	b, err := search.FailureBudget(job(nil))
	if err != nil || b != (search.Budget{Max: 3}) || b.Exhausted(2, 0) || !b.Exhausted(3, 0) || b.Exhausted(3, 1) {
		t.Errorf("default budget %+v, %v; want 3 failures before a first success", b, err)
	}
	b, err = search.FailureBudget(job(ptr.To("5")))
	if err != nil || b != (search.Budget{Max: 5, Annotated: true}) || b.Exhausted(4, 0) || !b.Exhausted(5, 9) {
		t.Errorf("budget of 5 %+v, %v; want 5 failures whatever succeeded", b, err)
	}
	for _, v := range []string{"", "0", "-2", "1.0", "1e3", " 4", "2147483648", "many"} {
		_, err := search.FailureBudget(job(ptr.To(v)))
		if err == nil || err.Field != "metadata.annotations[trainyard.dev/max-failed-trials]" || !strings.Contains(err.Error(), "whole number of failed trials from 1") {
			t.Errorf("annotation %q: error %v; want one at the annotation naming the fix", v, err)
		}
		if errs := search.ValidateSpec(job(ptr.To(v))); len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), "max-failed-trials") {
			t.Errorf("annotation %q: ValidateSpec %v; want the budget's error", v, errs)
		}
	}
}

// TestHugeGridDoesNotOverflow: a grid of 30 parameters of 10 choices (10^30
// combinations, past int) gives 100 distinct trials, parameter 0 cycling.
func TestHugeGridDoesNotOverflow(t *testing.T) {
	var params []trainer.Parameter
	for j := range 30 {
		params = append(params, categorical(fmt.Sprintf("p%d", j), strings.Split("0 1 2 3 4 5 6 7 8 9", " ")...))
	}
	s := mustNew(t, grid(params...), 0)
	if s.Size() != math.MaxInt {
		t.Errorf("Size = %d, want math.MaxInt", s.Size())
	}
	seen := map[string]bool{}
	for i := range 100 {
		a, err := s.Assignment(i)
		if err != nil {
			t.Fatal(err)
		}
		var key []string
		for _, v := range a {
			key = append(key, v.Value)
		}
		if seen[strings.Join(key, ",")] {
			t.Fatalf("trial %d repeats %v", i, key)
		}
		seen[strings.Join(key, ",")] = true
		if a[0].Value != strconv.Itoa(i%10) {
			t.Errorf("trial %d: p0 = %s, want %d", i, a[0].Value, i%10)
		}
	}
}

// TestFinalReportWait (issue 42, item 4): the wait for a trial's final report is the
// controller's default without annotation trainyard.dev/final-report-wait, the
// annotation's duration from 0s to 1h with it, and any other value is refused at the
// annotation, naming the fix, by FinalReportWait and ValidateSpec.
func TestFinalReportWait(t *testing.T) {
	job := func(v string) *trainer.OptimizationJob {
		return &trainer.OptimizationJob{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{search.AnnotationFinalReportWait: v}}}
	}
	if d, err := search.FinalReportWait(&trainer.OptimizationJob{}, 5*time.Second); err != nil || d != 5*time.Second {
		t.Errorf("no annotation: %v, %v; want the default 5s", d, err)
	}
	for v, want := range map[string]time.Duration{"0s": 0, "30s": 30 * time.Second, "2m30s": 150 * time.Second, "1h": time.Hour} {
		if d, err := search.FinalReportWait(job(v), 5*time.Second); err != nil || d != want {
			t.Errorf("annotation %q: %v, %v; want %v", v, d, err, want)
		}
	}
	for _, v := range []string{"", "30", "-1s", "61m", "soon", "1h0m1s"} {
		_, err := search.FinalReportWait(job(v), 5*time.Second)
		if err == nil || err.Field != "metadata.annotations[trainyard.dev/final-report-wait]" || !strings.Contains(err.Error(), "duration from 0s to 1h") {
			t.Errorf("annotation %q: error %v; want one at the annotation naming the range", v, err)
		}
		if errs := search.ValidateSpec(job(v)); len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), "final-report-wait") {
			t.Errorf("annotation %q: ValidateSpec %v; want the wait's error", v, errs)
		}
	}
}
