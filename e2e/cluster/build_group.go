package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/mod/modfile"
)

// The go builds: the sources grouped by build module and link flags, one go
// build per group, the groups built side by side.

// buildGroup is the sources built by one go build: those sharing a build
// module and link flags, or a single asset-only source.
type buildGroup struct {
	module string // folder under hack/kube-bins; "" for asset-only
	label  string // names the group's build log: its sources' names, joined by "+"
	srcs   []Source
}

// groupSources groups srcs by build module and link flags (stamp and
// patches), in first-seen order. Sources of one module that are stamped
// differently are linked by separate go builds, whose compiles Go's build
// cache shares.
func groupSources(srcs []Source) []*buildGroup {
	var groups []*buildGroup
	byKey := map[string]*buildGroup{}
	for _, src := range srcs {
		module := src.buildModule()
		key := fmt.Sprintf("%s %q %q", module, buildFlags(src), src.Patches)
		if g := byKey[key]; g != nil && module != "" {
			g.srcs = append(g.srcs, src)
			continue
		}
		g := &buildGroup{module: module, srcs: []Source{src}}
		byKey[key] = g
		groups = append(groups, g)
	}
	for _, g := range groups {
		names := make([]string, len(g.srcs))
		for i, src := range g.srcs {
			names[i] = src.Name
		}
		g.label = strings.Join(names, "+")
	}
	return groups
}

// buildAll builds the groups in lanes (see lanes), the lanes concurrently: each go
// build already compiles in parallel, but its link steps are serial, and
// overlapping them with another build's compiles shortens a cold build. The first
// failure cancels the rest and is the error returned, naming the builds it stopped.
func (o *BuildOptions) buildAll(ctx context.Context, srcs []Source) error {
	ctx, failures := newFirstFailure(ctx)
	var wg sync.WaitGroup
	for _, lane := range o.lanes(groupSources(srcs)) {
		wg.Go(func() {
			for i, g := range lane {
				if ctx.Err() != nil {
					// Stopped by another lane's failure: name what never started.
					for _, rest := range lane[i:] {
						failures.fail(rest.describe(), context.Cause(ctx))
					}
					return
				}
				failures.fail(g.describe(), o.buildGroup(ctx, g))
			}
		})
	}
	wg.Wait()
	return failures.Err()
}

// lanes orders groups for building: groups whose build modules select the same
// versions of client-go and of what it compiles against (clientGoPin) share most of
// what they compile (the Kubernetes staging modules and their dependencies), and Go's
// build cache gives a compiled package only to a build that starts after it was
// written: built side by side, each compiles it again (seen cold: the Kubernetes
// servers, kubectl, JobSet and kwok, and kube-proxy each compiling client-go v0.36.3
// at once). So such groups build one after another, in first-seen order (the
// Kubernetes servers, listed first, then what reuses their packages), and every other
// group, or one whose go.mod cannot be read, in a lane of its own.
func (o *BuildOptions) lanes(groups []*buildGroup) [][]*buildGroup {
	var lanes [][]*buildGroup
	byPin := map[string]int{}
	for _, g := range groups {
		pin := ""
		if g.module != "" {
			pin = clientGoPin(filepath.Join(o.RepoRoot, "hack", "kube-bins", g.module, "go.mod"))
		}
		if i, ok := byPin[pin]; ok && pin != "" {
			lanes[i] = append(lanes[i], g)
			continue
		}
		byPin[pin] = len(lanes)
		lanes = append(lanes, []*buildGroup{g})
	}
	return lanes
}

// clientGoClosure are the modules whose versions decide whether client-go's compiled
// packages are the same in two builds: client-go, the modules it imports most, and
// theirs. Two build modules agreeing on all of them share those packages; Kueue's,
// say, selects newer golang.org/x/net, kube-openapi and structured-merge-diff than the
// Kubernetes servers' and shares nothing with them.
var clientGoClosure = []string{
	"k8s.io/client-go", "k8s.io/apimachinery", "k8s.io/api", "k8s.io/kube-openapi", "k8s.io/utils",
	"sigs.k8s.io/structured-merge-diff/v6", "golang.org/x/net", "google.golang.org/protobuf",
}

// clientGoPin returns the versions the go.mod at path selects for clientGoClosure (a
// replace directive's version, else the requirement's), joined, e.g.
// "k8s.io/client-go@v0.36.3 k8s.io/apimachinery@v0.36.3 …"; or "" when it does not
// build client-go or cannot be read.
func clientGoPin(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	f, err := modfile.Parse(path, data, nil)
	if err != nil {
		return ""
	}
	selected := map[string]string{}
	for _, r := range f.Require {
		selected[r.Mod.Path] = r.Mod.Version
	}
	for _, r := range f.Replace {
		selected[r.Old.Path] = r.New.Path + "@" + r.New.Version
	}
	if selected["k8s.io/client-go"] == "" {
		return ""
	}
	pins := make([]string, len(clientGoClosure))
	for i, mod := range clientGoClosure {
		pins[i] = mod + "@" + selected[mod]
	}
	return strings.Join(pins, " ")
}

// buildGroup builds a group's binaries with one go build, then fills a
// temporary folder per source with its binaries and assets and renames it
// to its cache folder.
func (o *BuildOptions) buildGroup(ctx context.Context, g *buildGroup) (err error) {
	if err := os.MkdirAll(o.LogDir, 0o755); err != nil {
		return fmt.Errorf("creating log dir: %w", err)
	}
	logPath := filepath.Join(o.LogDir, "build-"+g.label+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("creating build log for %s: %w", g.label, err)
	}
	defer logFile.Close()
	defer func() {
		if err != nil {
			err = fmt.Errorf("building %s: %w (build log: %s)", g.describe(), err, logPath)
		}
	}()
	binDir, err := os.MkdirTemp(filepath.Join(o.CacheDir, "bin"), ".tmp-"+g.label+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(binDir)

	start := time.Now()
	var cpu time.Duration
	if pkgs := g.packages(); len(pkgs) > 0 {
		fmt.Fprintf(o.Progress, "building %s; a first build takes minutes, log: %s\n", g.describe(), logPath)
		if cpu, err = o.goBuild(ctx, g.srcs[0], pkgs, binDir, logFile); err != nil {
			return err
		}
	}
	for _, src := range g.srcs {
		if err := o.install(ctx, src, binDir, logFile); err != nil {
			return err
		}
	}
	fmt.Fprintf(o.Progress, "cached %s in %s (%s; go build %s CPU)\n", g.describe(), filepath.Join(o.CacheDir, "bin"),
		time.Since(start).Round(time.Second), cpu.Round(time.Second))
	return nil
}

// describe names the group's sources and versions, e.g.
// "kubernetes v1.36.3, jobset v0.12.0".
func (g *buildGroup) describe() string {
	parts := make([]string, len(g.srcs))
	for i, src := range g.srcs {
		parts[i] = src.Name + " " + src.Version
	}
	return strings.Join(parts, ", ")
}

// packages lists the packages of all binaries of the group.
func (g *buildGroup) packages() []string {
	var pkgs []string
	for _, src := range g.srcs {
		for _, name := range sortedKeys(src.Binaries) {
			pkgs = append(pkgs, src.Binaries[name])
		}
	}
	return pkgs
}

// goBuild builds pkgs with one go build inside src's build module
// (hack/kube-bins/<module>) and with src's flags and patches, writing each
// binary into dir under its default name. It returns the CPU time (user and
// system) of the go command and the compilers and linkers it ran, which the
// kernel adds to the go command's own usage as it reaps them: the figure a cold
// build's budget is made of (e2e/README.md#what-a-run-costs), where wall time
// depends on what else shares the cores.
func (o *BuildOptions) goBuild(ctx context.Context, src Source, pkgs []string, dir string, log io.Writer) (time.Duration, error) {
	modDir := filepath.Join(o.RepoRoot, "hack", "kube-bins", src.buildModule())
	args := append([]string{"build"}, buildFlags(src)...)
	if len(src.Patches) > 0 {
		overlay, patched, err := o.writeOverlay(ctx, src, pkgs, dir, log)
		if err != nil {
			return 0, err
		}
		args, pkgs = append(args, "-overlay="+overlay), patched
	}
	args = append(args, "-o", dir+string(filepath.Separator))
	args = append(args, pkgs...)
	cmd := exec.CommandContext(ctx, o.GoCommand, args...)
	cmd.Dir = modDir
	cmd.Env = goEnv()
	cmd.Stdout, cmd.Stderr = log, log
	fmt.Fprintf(log, "$ (cd %s && %s)\n", modDir, strings.Join(cmd.Args, " "))
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("go build: %w", err)
	}
	if o.Niceness > 0 {
		// Compilers forked from now on inherit the priority.
		_ = syscall.Setpriority(syscall.PRIO_PROCESS, cmd.Process.Pid, o.Niceness)
	}
	if err := cmd.Wait(); err != nil {
		return 0, fmt.Errorf("go build: %w", canceled(ctx, err))
	}
	return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
}

// buildFlags are the go build flags of src: no symbol tables (-s -w: smaller
// binaries, faster links; stack traces keep function names and lines), and
// src.Stamp. As part of the recipe, changing them builds a new cache folder.
func buildFlags(src Source) []string {
	ldflags := []string{"-s", "-w"}
	for _, name := range sortedKeys(src.Stamp) {
		ldflags = append(ldflags, "-X", name+"="+src.Stamp[name])
	}
	flags := []string{"-trimpath", "-ldflags=" + strings.Join(ldflags, " ")}
	if len(src.Tags) > 0 {
		flags = append(flags, "-tags="+strings.Join(src.Tags, ","))
	}
	return flags
}

// defaultBinaryName is the file name go build gives the binary of pkg: its
// last path element, or the one before a major-version suffix ("v3").
func defaultBinaryName(pkg string) string {
	base := path.Base(pkg)
	if len(base) > 1 && base[0] == 'v' && strings.Trim(base[1:], "0123456789") == "" {
		return path.Base(path.Dir(pkg))
	}
	return base
}

// goEnv is the environment for go commands: builds happen in their own
// modules, never in a workspace, with the versions locked by go.sum.
func goEnv() []string {
	env := make([]string, 0, len(os.Environ())+2)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOWORK=") && !strings.HasPrefix(kv, "GOFLAGS=") {
			env = append(env, kv)
		}
	}
	return append(env, "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false")
}
