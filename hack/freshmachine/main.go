// Command freshmachine fails when a command a new user or CI types could reach a build or
// a local cluster without installing the host's Debian packages first (issue 37): the
// README's two commands, every make target that builds or starts a local control plane,
// and each command of .ci/run that is not the README's test command.
//
// It reads make's own database (`make -pq`), so what it judges is the Makefile as make
// sees it, includes and all. `make verify` runs it from the repository root.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
)

func main() {
	problems, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "freshmachine:", err)
		os.Exit(1)
	}
	if len(problems) > 0 {
		fmt.Fprintln(os.Stderr, "freshmachine: commands that skip the host-package step on a fresh machine:")
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "  "+p)
		}
		os.Exit(1)
	}
	fmt.Printf("freshmachine: every README command and cluster target runs %s first\n", hostPackagesTarget)
}

func run() ([]string, error) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		return nil, err
	}
	ciRun, err := os.ReadFile(".ci/run")
	if err != nil {
		return nil, err
	}
	db, err := makeDatabase()
	if err != nil {
		return nil, err
	}
	return check(string(readme), string(ciRun), parseDatabase(db))
}

// makeDatabase returns make's printed database of the Makefile in the working folder.
// A target that does not exist is asked for with -q, so nothing is built: make prints
// its database and exits 2 for the missing target, which is expected.
func makeDatabase() ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("make", "--no-print-directory", "-pq", "__freshmachine_database__")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && bytes.Contains(stderr.Bytes(), []byte("__freshmachine_database__"))) {
		return nil, fmt.Errorf("make -pq: %v: %s", err, stderr.Bytes())
	}
	return stdout.Bytes(), nil
}
