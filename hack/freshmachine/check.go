package main

import (
	"bufio"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// hostPackagesTarget installs the host's Debian packages (hack/install-host-packages.sh).
const hostPackagesTarget = "host-packages"

// clusterRecipe matches a recipe line that builds or starts a local control plane: the
// localcluster command, or a go command run in the e2e module (its tests, dev, bench).
var clusterRecipe = regexp.MustCompile(`\$\(LOCALCLUSTER\)|\bcd +(\$\(CLUSTER_ROOT\)/)?e2e\b`)

// rule is one target of make's database: its prerequisites and its recipe lines, as
// written (variables unexpanded).
type rule struct {
	prereqs []string
	recipe  []string
}

// parseDatabase reads the targets of `make -p` output: a line "target: prereq …" outside
// comments, followed by its recipe lines (each starting with a tab). Variable
// assignments and target-specific variables are skipped.
func parseDatabase(db []byte) map[string]*rule {
	rules := map[string]*rule{}
	var cur *rule
	sc := bufio.NewScanner(strings.NewReader(string(db)))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "\t"):
			if cur != nil {
				cur.recipe = append(cur.recipe, strings.TrimPrefix(line, "\t"))
			}
			continue
		case line == "" || strings.HasPrefix(line, "#"):
			if line == "" {
				cur = nil
			}
			continue
		}
		cur = nil
		name, rest, ok := strings.Cut(line, ":")
		if !ok || strings.Contains(line, "=") || strings.HasPrefix(rest, ":") || strings.ContainsAny(name, " \t%") {
			continue
		}
		cur = &rule{prereqs: strings.Fields(strings.ReplaceAll(rest, "|", " "))}
		rules[name] = cur
	}
	return rules
}

// reaches reports whether target depends on want, directly or through its prerequisites.
func reaches(rules map[string]*rule, target, want string) bool {
	seen := map[string]bool{}
	var visit func(string) bool
	visit = func(t string) bool {
		if t == want {
			return true
		}
		if seen[t] {
			return false
		}
		seen[t] = true
		r := rules[t]
		if r == nil {
			return false
		}
		for _, p := range r.prereqs {
			if visit(p) {
				return true
			}
		}
		return false
	}
	return visit(target)
}

// closureRecipes returns the recipe lines of target and of everything it depends on.
func closureRecipes(rules map[string]*rule, target string) []string {
	seen := map[string]bool{}
	var lines []string
	var visit func(string)
	visit = func(t string) {
		if seen[t] || rules[t] == nil {
			return
		}
		seen[t] = true
		lines = append(lines, rules[t].recipe...)
		for _, p := range rules[t].prereqs {
			visit(p)
		}
	}
	visit(target)
	return lines
}

// twoCommands returns the make targets of the README's code block under the heading
// "The two commands", in order; the last is the test command CI runs.
func twoCommands(readme string) ([]string, error) {
	_, section, ok := strings.Cut(readme, "\n## The two commands")
	if !ok {
		return nil, fmt.Errorf("README.md has no section %q", "## The two commands")
	}
	_, block, ok := strings.Cut(section, "```sh\n")
	if !ok {
		return nil, fmt.Errorf("README.md's section %q has no sh code block", "The two commands")
	}
	block, _, _ = strings.Cut(block, "```")
	var targets []string
	for _, line := range strings.Split(block, "\n") {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if f[0] != "make" || len(f) != 2 {
			return nil, fmt.Errorf("README.md's two commands: %q is not `make <target>`", strings.TrimSpace(line))
		}
		targets = append(targets, f[1])
	}
	if len(targets) != 2 {
		return nil, fmt.Errorf("README.md's two commands name %d make targets, want 2", len(targets))
	}
	return targets, nil
}

// ciCommands returns the commands of .ci/run: its lines less comments, blank lines and
// the shell's own setup (set, cd).
func ciCommands(script string) []string {
	var cmds []string
	for _, line := range strings.Split(script, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "set ") || strings.HasPrefix(line, "cd ") {
			continue
		}
		cmds = append(cmds, line)
	}
	return cmds
}

// check returns the problems, one line each:
//   - a README command whose target does not depend on hostPackagesTarget;
//   - a target whose recipe builds or starts a local cluster without depending on it;
//   - .ci/run without the README's test command;
//   - a command of .ci/run that is neither the README's test command nor `go version`
//     nor part of what that command runs: a prerequisite added to CI alone, which a
//     fresh machine following the README never gets.
func check(readme, ciRun string, rules map[string]*rule) ([]string, error) {
	if rules[hostPackagesTarget] == nil {
		return nil, fmt.Errorf("the Makefile has no %s target", hostPackagesTarget)
	}
	targets, err := twoCommands(readme)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, t := range targets {
		if rules[t] == nil {
			problems = append(problems, fmt.Sprintf("README.md: `make %s`: no such target", t))
		} else if !reaches(rules, t, hostPackagesTarget) {
			problems = append(problems, fmt.Sprintf("README.md: `make %s` does not depend on %s", t, hostPackagesTarget))
		}
	}
	names := make([]string, 0, len(rules))
	for name := range rules {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for _, line := range rules[name].recipe {
			if clusterRecipe.MatchString(line) && !reaches(rules, name, hostPackagesTarget) {
				problems = append(problems, fmt.Sprintf("Makefile: %s builds or starts a local cluster (%q) but does not depend on %s", name, strings.TrimSpace(line), hostPackagesTarget))
				break
			}
		}
	}
	testCommand := "make " + targets[len(targets)-1]
	ran := strings.Join(closureRecipes(rules, targets[len(targets)-1]), "\n")
	cmds := ciCommands(ciRun)
	if !slices.Contains(cmds, testCommand) {
		problems = append(problems, fmt.Sprintf(".ci/run does not run README.md's test command `%s`", testCommand))
	}
	for _, c := range cmds {
		if c == testCommand || c == "go version" || strings.Contains(ran, c) {
			continue
		}
		problems = append(problems, fmt.Sprintf(".ci/run: %q runs in CI only: make it part of `%s` (or of a target it depends on), so a fresh machine following README.md runs it too", c, testCommand))
	}
	return problems, nil
}
