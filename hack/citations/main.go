// Command citations fails when a file of the repository cites a document that does not
// resolve: a docs/….md path (from the repository root) or a Markdown link (from the
// linking file) naming a missing file or heading, or a rule document outside the
// repository (the upstream compatibility contract by its outside name, "invariant N"
// without docs/design/architecture.md).
// `make verify` runs it from the repository root.
package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	problems, err := checkTree(os.DirFS("."))
	if err != nil {
		fmt.Fprintln(os.Stderr, "citations:", err)
		os.Exit(1)
	}
	if len(problems) > 0 {
		fmt.Fprintln(os.Stderr, "citations: references that do not resolve to a document in this repository:")
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "  "+p)
		}
		os.Exit(1)
	}
	fmt.Println("citations: every cited document and heading exists")
}

// checkTree checks every text file of root, skipping hidden directories and _output.
func checkTree(root fs.FS) ([]string, error) {
	docs := &headings{root: root, byFile: map[string]map[string]bool{}}
	var problems []string
	err := fs.WalkDir(root, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// Hidden directories hold no documentation, _output only build results, and
			// this command's own sources name the citations it refuses.
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "_output" || path == "hack/citations") {
				return fs.SkipDir
			}
			return nil
		}
		if !isText(path) {
			return nil
		}
		data, err := fs.ReadFile(root, path)
		if err != nil {
			return err
		}
		problems = append(problems, checkFile(path, string(data), docs)...)
		return nil
	})
	return problems, err
}

// isText reports whether path is a file whose comments or prose may cite a document.
func isText(path string) bool {
	switch filepath.Ext(path) {
	case ".go", ".md", ".sh", ".yaml", ".yml", ".tpl", ".txt", ".mk":
		return true
	}
	return filepath.Base(path) == "Makefile"
}
