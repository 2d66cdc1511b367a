// Package search chooses the parameters of an OptimizationJob's trials (KEP-3562):
// random search (seeded; uniform, log-uniform and categorical spaces, Int values
// rounded) and grid search (every combination of categorical choices in a stable order).
//
// A trial's assignment is a pure function of the search and the trial's index, so the
// controller keeps no state outside the API: after a restart it finds which indexes
// its trial TrainJobs already have and makes the next ones, and a trial is never
// created twice with different parameters. Random search draws each trial from its own
// generator, seeded by the search's seed and the trial's index, so trial 7 has the same
// parameters however many trials ran before it.
package search

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// ErrExhausted is returned for a grid index past the last combination: a grid has at
// most the product of its parameters' choice counts trials, however many numTrials asks.
var ErrExhausted = errors.New("search: every combination of the grid has been tried")

// Search is the search of one OptimizationJob.
type Search struct {
	params []trainer.Parameter
	grid   bool
	seed   uint64
	// sizes are the grid's choice counts per parameter (grid search only).
	sizes []int
}

// New returns the search of spec. seed is used when spec's random search sets none (the
// controller passes one derived from the OptimizationJob's uid, so each OptimizationJob
// has its own and keeps it across restarts). Errors: a parameter whose space is empty
// or whose bounds do not parse, a grid over a parameter that is not categorical, and
// the errors Validate returns.
func New(spec *trainer.OptimizationJobSpec, seed int64) (*Search, error) {
	if err := Validate(spec); err != nil {
		return nil, err
	}
	s := &Search{params: spec.Parameters, seed: uint64(seed)}
	if alg := spec.SearchAlgorithm; alg != nil && alg.Grid != nil {
		s.grid = true
		for _, p := range spec.Parameters {
			s.sizes = append(s.sizes, len(p.SearchSpace.Categorical.Choices))
		}
	} else if alg != nil && alg.Random != nil && alg.Random.Seed != nil {
		s.seed = uint64(*alg.Random.Seed)
	}
	return s, nil
}

// Size returns how many distinct trials the search can make: the grid's combinations,
// or math.MaxInt for random search.
func (s *Search) Size() int {
	if !s.grid {
		return math.MaxInt
	}
	n := 1
	for _, size := range s.sizes {
		if n > math.MaxInt/size {
			return math.MaxInt
		}
		n *= size
	}
	return n
}

// Assignment returns the parameters of trial index (from 0), one per spec parameter in
// spec order, each value in its wire form (ParameterAssignment.Value): a categorical
// choice as written; an Int as a decimal integer; a Float in the shortest form that
// reads back as the same float64 (strconv 'g', e.g. 0.0031622776601683794 or 1e-05).
// Errors: ErrExhausted for a grid index past its last combination; a negative index.
func (s *Search) Assignment(index int) ([]trainer.ParameterAssignment, error) {
	if index < 0 {
		return nil, fmt.Errorf("search: trial index %d is negative", index)
	}
	if s.grid {
		return s.gridAssignment(index)
	}
	rng := rand.New(rand.NewPCG(s.seed, uint64(index)))
	out := make([]trainer.ParameterAssignment, 0, len(s.params))
	for _, p := range s.params {
		out = append(out, trainer.ParameterAssignment{Name: p.Name, Value: sample(rng, p.SearchSpace)})
	}
	return out, nil
}

// gridAssignment is combination index of the grid, counting like an odometer: the last
// parameter's choice changes fastest, each parameter's choices in spec order.
func (s *Search) gridAssignment(index int) ([]trainer.ParameterAssignment, error) {
	if index >= s.Size() {
		return nil, ErrExhausted
	}
	out := make([]trainer.ParameterAssignment, len(s.params))
	for i := len(s.params) - 1; i >= 0; i-- {
		choices := s.params[i].SearchSpace.Categorical.Choices
		out[i] = trainer.ParameterAssignment{Name: s.params[i].Name, Value: choices[index%len(choices)]}
		index /= len(choices)
	}
	return out, nil
}

// sample draws one value of space (valid: New checked it).
func sample(rng *rand.Rand, space trainer.SearchSpace) string {
	switch {
	case space.Categorical != nil:
		c := space.Categorical.Choices
		return c[rng.IntN(len(c))]
	case space.Uniform != nil:
		lo, hi := mustParse(space.Uniform.Min), mustParse(space.Uniform.Max)
		if space.Uniform.Type == trainer.ParameterTypeInt {
			a, b := int64(math.Ceil(lo)), int64(math.Floor(hi))
			return strconv.FormatInt(a+rng.Int64N(b-a+1), 10)
		}
		return formatFloat(lo + rng.Float64()*(hi-lo))
	default:
		lo, hi := mustParse(space.LogUniform.Min), mustParse(space.LogUniform.Max)
		v := math.Exp(math.Log(lo) + rng.Float64()*(math.Log(hi)-math.Log(lo)))
		if space.LogUniform.Type == trainer.ParameterTypeInt {
			r := math.Round(v)
			r = math.Max(math.Ceil(lo), math.Min(math.Floor(hi), r))
			return strconv.FormatInt(int64(r), 10)
		}
		return formatFloat(math.Max(lo, math.Min(hi, v)))
	}
}

func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func mustParse(d trainer.Double) float64 {
	v, err := strconv.ParseFloat(string(d), 64)
	if err != nil {
		panic(fmt.Sprintf("search: bound %q was validated but does not parse: %v", d, err))
	}
	return v
}
