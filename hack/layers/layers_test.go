package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const module = "example.com/m"

var testLayers = []layer{
	{"base", []string{"pkg/base/..."}},
	{"engine", []string{"pkg/engine"}},
	{"model", []string{"pkg/stages/plan"}},
	{"stages", []string{"pkg/stages/..."}},
	{"table", []string{"pkg/stages"}},
	{"kits", []string{"pkg/stages/plan/plantest"}},
}

func TestCheck(t *testing.T) {
	for name, tc := range map[string]struct {
		pkgs []pkg
		want []string
	}{
		"downward and sideways imports": {
			pkgs: []pkg{
				{ImportPath: module + "/pkg/stages/a", Imports: []string{module + "/pkg/engine", module + "/pkg/stages/b", "fmt"}},
				{ImportPath: module + "/pkg/engine", Imports: []string{module + "/pkg/base/x", "other.org/y"}},
			},
		},
		"an upward import": {
			pkgs: []pkg{{ImportPath: module + "/pkg/engine", Imports: []string{module + "/pkg/stages/a"}}},
			want: []string{`pkg/engine (layer "engine") imports pkg/stages/a (layer "stages", above it)`},
		},
		"the most specific pattern wins": {
			pkgs: []pkg{
				{ImportPath: module + "/pkg/stages/plan", Imports: []string{module + "/pkg/stages/a"}},
				{ImportPath: module + "/pkg/stages/a", Imports: []string{module + "/pkg/stages", module + "/pkg/stages/plan/plantest"}},
			},
			want: []string{
				`pkg/stages/a (layer "stages") imports pkg/stages (layer "table", above it)`,
				`pkg/stages/a (layer "stages") imports pkg/stages/plan/plantest (layer "kits", above it)`,
				`pkg/stages/plan (layer "model") imports pkg/stages/a (layer "stages", above it)`,
			},
		},
		"a package in no layer": {
			pkgs: []pkg{{ImportPath: module + "/pkg/new"}},
			want: []string{"pkg/new is in no layer: add it to the layers in hack/layers and docs/design/architecture.md#layers"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, check(module, testLayers, tc.pkgs)); diff != "" {
				t.Errorf("check() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecode(t *testing.T) {
	in := `{"ImportPath": "example.com/m/a", "Imports": ["fmt"]}
{"ImportPath": "example.com/m/b"}`
	got, err := decode(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []pkg{{ImportPath: "example.com/m/a", Imports: []string{"fmt"}}, {ImportPath: "example.com/m/b"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decode() (-want +got):\n%s", diff)
	}
}
