// Command images builds and lists the container images of package e2e/images,
// the stand-ins a real node of the e2e cluster pulls under upstream's names:
//
//	go run ./cmd/images list            # each image: names, size, cache folder, or "not built"
//	go run ./cmd/images build [KEY...]  # build the images named (default: all) into the cache
//
// Keys: pause, busybox, pytorch, deepspeed, xgboost. Builds need mmdebstrap
// (apt-get install mmdebstrap) and root; the cache is the e2e cluster's
// ($TRAINYARD_CACHE_DIR, else ~/.cache/trainyard), see e2e/images.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"text/tabwriter"

	"github.com/trainyard/trainyard/e2e/images"
)

func main() {
	cacheDir := flag.String("cache-dir", "", "cache root (default: $TRAINYARD_CACHE_DIR, else ~/.cache/trainyard)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: images [flags] build [KEY...] | list")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(flag.Args(), images.Options{CacheDir: *cacheDir, Progress: os.Stderr}); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(args []string, opts images.Options) error {
	if len(args) == 0 {
		flag.Usage()
		return fmt.Errorf("no command")
	}
	recipes, err := selected(args[1:])
	if err != nil {
		return err
	}
	switch args[0] {
	case "list":
		return list(opts, recipes)
	case "build":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if _, err := images.Build(ctx, opts, recipes...); err != nil {
			return err
		}
		return list(opts, recipes)
	default:
		return fmt.Errorf("unknown command %q", args[0])
	}
}

// selected returns the recipes whose keys are given, all without keys.
func selected(keys []string) ([]*images.Recipe, error) {
	if len(keys) == 0 {
		return images.All, nil
	}
	var out []*images.Recipe
	for _, k := range keys {
		i := slices.IndexFunc(images.All, func(r *images.Recipe) bool { return r.Key == k })
		if i < 0 {
			return nil, fmt.Errorf("no image %q", k)
		}
		out = append(out, images.All[i])
	}
	return out, nil
}

func list(opts images.Options, recipes []*images.Recipe) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tSIZE\tBUILD TIME\tNAMES\tCACHE")
	for _, r := range recipes {
		im, err := images.Lookup(opts, r)
		if err != nil {
			return err
		}
		for i, n := range r.Names {
			switch {
			case i > 0:
				fmt.Fprintf(tw, "\t\t\t%s\t\n", n)
			case im == nil:
				fmt.Fprintf(tw, "%s\t-\t-\t%s\tnot built (%s)\n", r.Key, n, opts.Dir(r))
			default:
				fmt.Fprintf(tw, "%s\t%.1f MiB\t%s\t%s\t%s\n", r.Key, float64(im.Size)/(1<<20), im.BuildTime.Round(1e9), n, im.Dir)
			}
		}
	}
	return tw.Flush()
}
