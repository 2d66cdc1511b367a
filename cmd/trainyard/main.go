// Command trainyard is the Trainyard TrainJob controller: it reconciles Kubeflow
// Trainer v2 TrainJobs (trainer.kubeflow.org/v1alpha1) into JobSets through a pipeline
// of staged, rate-limited workqueues fed by shared informers.
//
// `trainyard render` prints, offline, what the controller would apply for a TrainJob.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/trainyard/trainyard/cmd/trainyard/app"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == app.RenderCommand {
		os.Exit(app.RunRender(context.Background(), os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	opts := app.NewOptions()
	fs := pflag.NewFlagSet("trainyard", pflag.ContinueOnError)
	opts.AddFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: trainyard [flags]         run the controller\n       trainyard render -f FILE...  print what it would apply for a TrainJob (trainyard render --help)\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == pflag.ErrHelp {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	cfg, err := opts.Config(fs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "trainyard:", err)
		os.Exit(2)
	}
	// SIGTERM and SIGINT stop intake, drain the stages and exit 0.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := app.Run(ctx, cfg, opts); err != nil {
		fmt.Fprintln(os.Stderr, "trainyard:", err)
		os.Exit(1)
	}
}
