package app

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/trainyard/trainyard/pkg/render"
	"github.com/trainyard/trainyard/pkg/stages"
	"github.com/trainyard/trainyard/pkg/stages/mlpolicy"
)

// RenderCommand is the subcommand name of the offline renderer: `trainyard render`.
const RenderCommand = "render"

// Exit codes of RunRender.
const (
	ExitOK         = 0
	ExitBadInput   = 1 // a file, an object or a TrainJob cannot be rendered
	ExitBadCommand = 2 // unknown flag, missing -f
)

const renderUsage = `Usage: trainyard render -f FILE [-f FILE ...] [flags]

Prints, as YAML, every object Trainyard would apply for each TrainJob in the files
(PodGroups, Workloads, ConfigMaps, Secrets with their data redacted, then the JobSet),
built offline by the controller's own stages. Pass the TrainJob, its TrainingRuntime or
ClusterTrainingRuntime, and the ResourceClaimTemplates, ResourceClaims and DeviceClasses
its pods claim. A TrainJob that cannot be built prints the error the controller would
put in its condition, naming the file, the object and the field, and exits 1.

What the controller's configuration changes in the JobSet (feature gate TrainJobStatus:
the progress server's URL, token and CA in trainer containers) follows --config, the
controller's configuration file, and the defaults without it, as the controller does.

The names of the MPI SSH and Flux CURVE Secrets end in a hash of the TrainJob's uid
under the installation's key. To print the controller's names, pass the live TrainJob
(kubectl get -o yaml: it carries the uid) and the key, as the controller's Secret holds
it: --secret-name-key "$(kubectl get secret -n trainyard-system trainyard-secret-name-key
-o jsonpath='{.data.key}')". Without --secret-name-key, names use an empty key.

Flags:
`

// RunRender runs `trainyard render` with args (the arguments after "render"), reading
// "-f -" from stdin and writing the YAML to stdout and errors to stderr. It returns the
// process exit code: ExitOK, ExitBadInput or ExitBadCommand. Nothing is written to
// stdout unless every TrainJob rendered.
func RunRender(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	flags, exit := parseRenderFlags(args, stderr)
	if flags == nil {
		return exit
	}
	sources, err := readSources(flags.files, stdin)
	if err != nil {
		fmt.Fprintln(stderr, "trainyard render:", err)
		return ExitBadInput
	}
	opts, exit := flags.renderOptions(stderr)
	if exit != ExitOK {
		return exit
	}
	in, err := render.Load(sources, flags.namespace)
	if err != nil {
		fmt.Fprintln(stderr, "trainyard render:", err)
		return ExitBadInput
	}
	results, err := render.Render(ctx, in, opts)
	if err != nil {
		// One line per TrainJob that failed.
		errs := []error{err}
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			errs = joined.Unwrap()
		}
		for _, e := range errs {
			fmt.Fprintln(stderr, "trainyard render:", e)
		}
		return ExitBadInput
	}
	if err := render.WriteYAML(stdout, results); err != nil {
		fmt.Fprintln(stderr, "trainyard render:", err)
		return ExitBadInput
	}
	return ExitOK
}

// renderFlags are the flags of `trainyard render`.
type renderFlags struct {
	fs                  *pflag.FlagSet // tells which flags were set
	files               []string
	namespace           string
	apiVersions         []string
	configFile          string
	controllerNamespace string
	secretNameKey       string
}

// parseRenderFlags parses args as the flags of `trainyard render`, printing the usage
// and errors to stderr. It returns the flags, or nil and the exit code: ExitOK for
// --help, ExitBadCommand for a flag that does not parse, an argument that is no flag,
// or no -f.
func parseRenderFlags(args []string, stderr io.Writer) (*renderFlags, int) {
	f := &renderFlags{fs: pflag.NewFlagSet("trainyard render", pflag.ContinueOnError)}
	fs := f.fs
	fs.SetOutput(stderr)
	fs.StringArrayVarP(&f.files, "filename", "f", nil, `File of YAML or JSON documents to read; "-" reads stdin. Repeatable.`)
	fs.StringVarP(&f.namespace, "namespace", "n", "default", "Namespace of the namespaced inputs that set none.")
	fs.StringSliceVar(&f.apiVersions, "api-versions", nil, "Group versions the cluster serves, as discovery would report them, e.g. "+
		"scheduling.x-k8s.io/v1alpha1,resource.k8s.io/v1 (gang backends: scheduling.k8s.io/v1alpha2, scheduling.x-k8s.io/v1alpha1, "+
		"scheduling.volcano.sh/v1beta1; DRA: resource.k8s.io/v1). Default: every API is served.")
	fs.StringVar(&f.configFile, "config", "", "The controller's configuration file (config.trainyard.dev/v1alpha1 Configuration), as its --config. Default: the controller's defaults.")
	fs.StringVar(&f.controllerNamespace, "controller-namespace", "trainyard-system", "Namespace the controller runs in, part of the progress server's URL injected into trainer containers.")
	fs.StringVar(&f.secretNameKey, "secret-name-key", "", "The controller's Secret-name key, base64 as the data of its Secret (sideObjects.secretNameKeySecret). Default: an empty key, whose Secret names differ from the controller's.")
	fs.Usage = func() {
		fmt.Fprint(stderr, renderUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil, ExitOK
		}
		fmt.Fprintln(stderr, "trainyard render:", err)
		return nil, ExitBadCommand
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "trainyard render: unexpected arguments %q: pass files with -f\n", fs.Args())
		return nil, ExitBadCommand
	}
	if len(f.files) == 0 {
		fmt.Fprintln(stderr, "trainyard render: no input: pass the TrainJob and its runtime with -f FILE (-f - for stdin)")
		return nil, ExitBadCommand
	}
	return f, ExitOK
}

// renderOptions returns the options of render.Render the flags ask for: the build
// options of --config and --controller-namespace (renderBuildOptions), the Secret names
// of --secret-name-key and the served --api-versions, each when set, and ExitOK.
// Otherwise it prints the error to stderr and returns its exit code: ExitBadInput for
// the configuration, ExitBadCommand for the key.
func (f *renderFlags) renderOptions(stderr io.Writer) (render.Options, int) {
	buildOpts, err := renderBuildOptions(f.configFile, f.controllerNamespace)
	if err != nil {
		fmt.Fprintln(stderr, "trainyard render:", err)
		return render.Options{}, ExitBadInput
	}
	if f.fs.Changed("secret-name-key") {
		if buildOpts.SecretNames, err = parseSecretNameKey(f.secretNameKey); err != nil {
			fmt.Fprintln(stderr, "trainyard render: --secret-name-key:", err)
			return render.Options{}, ExitBadCommand
		}
	}
	opts := render.Options{Build: buildOpts}
	if f.fs.Changed("api-versions") {
		opts.APIVersions = append([]string{}, f.apiVersions...)
	}
	return opts, ExitOK
}

// renderBuildOptions reads the controller's configuration file as the controller does
// (strictly, defaulted, validated; the defaults when file is empty) and derives the
// plan-building options from it (buildOptions).
func renderBuildOptions(file, controllerNamespace string) (stages.Options, error) {
	o := NewOptions()
	o.ConfigFile = file
	fs := pflag.NewFlagSet("config", pflag.ContinueOnError)
	o.AddFlags(fs)
	cfg, err := o.Config(fs)
	if err != nil {
		return stages.Options{}, err
	}
	return buildOptions(cfg, controllerNamespace)
}

// parseSecretNameKey decodes a Secret-name key given as the base64 of its Secret's data
// (what kubectl prints).
func parseSecretNameKey(s string) (mlpolicy.SecretNames, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return mlpolicy.SecretNames{}, fmt.Errorf("not base64 (pass the data of the key's Secret as kubectl prints it): %w", err)
	}
	return mlpolicy.NewSecretNames(key)
}

// readSources reads each file, "-" once from stdin.
func readSources(files []string, stdin io.Reader) ([]render.Source, error) {
	sources := make([]render.Source, 0, len(files))
	readStdin := false
	for _, f := range files {
		if f == "-" {
			if readStdin {
				return nil, errors.New(`-f -: stdin can be read only once`)
			}
			readStdin = true
			data, err := io.ReadAll(stdin)
			if err != nil {
				return nil, fmt.Errorf("reading stdin: %w", err)
			}
			sources = append(sources, render.Source{Name: "<stdin>", Data: data})
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		sources = append(sources, render.Source{Name: f, Data: data})
	}
	return sources, nil
}
