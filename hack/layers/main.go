// Command layers fails when a package of the main module imports a package of a higher
// layer (docs/design/architecture.md#layers), or sits in no layer. `make lint` runs it
// from the repository root.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "layers:", err)
		os.Exit(1)
	}
	fmt.Println("layers: no upward import")
}

func run() error {
	module, err := goList("-m")
	if err != nil {
		return err
	}
	out, err := goList("-e", "-json=ImportPath,Imports", "./...")
	if err != nil {
		return err
	}
	pkgs, err := decode(bytes.NewReader(out))
	if err != nil {
		return err
	}
	if problems := check(strings.TrimSpace(string(module)), layers, pkgs); len(problems) > 0 {
		return errors.New("\n  " + strings.Join(problems, "\n  "))
	}
	return nil
}

// goList runs `go list args...` and returns its standard output.
func goList(args ...string) ([]byte, error) {
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s: %w", strings.Join(args, " "), err)
	}
	return out, nil
}

// decode reads the stream of JSON objects `go list -json` prints.
func decode(r io.Reader) ([]pkg, error) {
	var pkgs []pkg
	dec := json.NewDecoder(r)
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return pkgs, nil
		} else if err != nil {
			return nil, fmt.Errorf("decoding go list: %w", err)
		}
		pkgs = append(pkgs, p)
	}
}
