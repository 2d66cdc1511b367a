package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const readme = "# Project\n\n## The two commands\n\n```sh\nmake dev     # the main job\nmake check   # the tests\n```\n"

// database writes makefile into a temporary folder and returns the targets of make's
// own database of it, so the parser is tested on what make really prints.
func database(t *testing.T, makefile string) map[string]*rule {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), []byte(makefile), 0o644); err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	db, err := makeDatabase()
	if err != nil {
		t.Fatal(err)
	}
	return parseDatabase(db)
}

// makefile is a Makefile shaped like the project's: an included cluster part whose
// localcluster target depends on host-packages, dev and check on top.
const makefile = `GO ?= go
LOCALCLUSTER := _output/bin/localcluster
.PHONY: host-packages localcluster dev check bench
host-packages:
	@hack/install-host-packages.sh
localcluster: host-packages
	cd e2e && go build -o $(LOCALCLUSTER) ./cmd/localcluster
cluster-ensure: localcluster
	$(LOCALCLUSTER) up --detach
dev: cluster-ensure ## the main job
	cd e2e && $(GO) run ./cmd/dev
check: host-packages
	hack/check.sh
`

func TestCheck(t *testing.T) {
	const ciRun = "#!/usr/bin/env bash\n# CI\nset -o errexit\ncd \"$(dirname \"$0\")/..\"\n\ngo version\nmake check\n"
	tests := []struct {
		name            string
		makefile, ciRun string
		want            []string
	}{
		{name: "every path installs first", makefile: makefile, ciRun: ciRun},
		{
			name:     "check skips the host packages",
			makefile: strings.Replace(makefile, "check: host-packages", "check:", 1),
			ciRun:    ciRun,
			want:     []string{"README.md: `make check` does not depend on host-packages"},
		},
		{
			name:     "localcluster skips them: every cluster target and dev do",
			makefile: strings.Replace(makefile, "localcluster: host-packages", "localcluster:", 1),
			ciRun:    ciRun,
			want: []string{
				"README.md: `make dev` does not depend on host-packages",
				`Makefile: cluster-ensure builds or starts a local cluster ("$(LOCALCLUSTER) up --detach") but does not depend on host-packages`,
				`Makefile: dev builds or starts a local cluster ("cd e2e && $(GO) run ./cmd/dev") but does not depend on host-packages`,
				`Makefile: localcluster builds or starts a local cluster ("cd e2e && go build -o $(LOCALCLUSTER) ./cmd/localcluster") but does not depend on host-packages`,
			},
		},
		{
			name:     "a benchmark that starts its own cluster",
			makefile: makefile + "bench:\n\tcd e2e && $(GO) run ./cmd/bench --n=10\n",
			ciRun:    ciRun,
			want:     []string{`Makefile: bench builds or starts a local cluster ("cd e2e && $(GO) run ./cmd/bench --n=10") but does not depend on host-packages`},
		},
		{
			name:     "what make check already runs may stay in .ci/run",
			makefile: makefile,
			ciRun:    strings.Replace(ciRun, "make check", "hack/install-host-packages.sh\nmake check", 1),
		},
		{
			name:     "a prerequisite added to .ci/run alone",
			makefile: makefile,
			ciRun:    strings.Replace(ciRun, "make check", "apt-get install -y mmdebstrap\nmake check", 1),
			want:     []string{`.ci/run: "apt-get install -y mmdebstrap" runs in CI only: make it part of ` + "`make check`" + ` (or of a target it depends on), so a fresh machine following README.md runs it too`},
		},
		{
			name:     ".ci/run runs something else than the README's test command",
			makefile: makefile,
			ciRun:    strings.Replace(ciRun, "make check", "make test", 1),
			want: []string{
				".ci/run does not run README.md's test command `make check`",
				`.ci/run: "make test" runs in CI only: make it part of ` + "`make check`" + ` (or of a target it depends on), so a fresh machine following README.md runs it too`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := check(readme, tt.ciRun, database(t, tt.makefile))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckRefusesAREADMEWithoutTwoMakeCommands(t *testing.T) {
	rules := database(t, makefile)
	for _, bad := range []string{
		"# no section\n",
		"## The two commands\n\n```sh\nmake dev\n```\n",
		"## The two commands\n\n```sh\nmake dev\n./hack/setup.sh\nmake check\n```\n",
	} {
		if _, err := check(bad, "make check\n", rules); err == nil {
			t.Errorf("check(%q) = nil error, want one", bad)
		}
	}
}

// TestRepository runs the check on this repository's README, .ci/run and Makefile.
func TestRepository(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	wd, _ := os.Getwd()
	if err := os.Chdir("../.."); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	problems, err := run()
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) > 0 {
		t.Errorf("problems:\n%s", strings.Join(problems, "\n"))
	}
}
