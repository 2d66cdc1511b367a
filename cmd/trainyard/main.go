// Command trainyard is the Trainyard TrainJob controller: it reconciles Kubeflow
// Trainer v2 TrainJobs (trainer.kubeflow.org/v1alpha1) into JobSets through a pipeline
// of staged, rate-limited workqueues fed by shared informers.
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
	opts := app.NewOptions()
	fs := pflag.NewFlagSet("trainyard", pflag.ContinueOnError)
	opts.AddFlags(fs)
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
