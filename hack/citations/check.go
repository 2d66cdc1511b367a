package main

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strings"
	"unicode"
)

var (
	// repoDoc is a document named from the repository root, e.g. docs/compatibility.md#mpi.
	repoDoc = regexp.MustCompile(`(?:^|[^\w./-])(docs/[\w./-]+\.md)(#[\w-]+)?`)
	// mdLink is the target of a Markdown link, e.g. ](../compatibility.md#mpi).
	mdLink = regexp.MustCompile(`\]\(([^)\s]*)\)`)
	// outside are citations of rule documents that are not in this repository: the
	// design sketch's compatibility contract and docs folder beside the repository.
	// The bracketed characters keep this file from matching its own patterns.
	outside = []*regexp.Regexp{
		regexp.MustCompile(`trainer[-]compat`),
		regexp.MustCompile(`shared[/]docs`),
		regexp.MustCompile(`(?i)\binvariants? +\d`),
		regexp.MustCompile(`§ ?\d`), // a section number: this repository's documents have none
	}
)

// checkFile returns the problems of one file's citations, as "file:line: problem".
func checkFile(file, text string, docs *headings) []string {
	var problems []string
	for i, line := range strings.Split(text, "\n") {
		report := func(format string, args ...any) {
			problems = append(problems, fmt.Sprintf("%s:%d: ", file, i+1)+fmt.Sprintf(format, args...))
		}
		for _, re := range outside {
			if m := re.FindString(line); m != "" {
				report("%q cites a document outside the repository; cite docs/compatibility.md or docs/design/architecture.md#<section>", m)
			}
		}
		for _, m := range repoDoc.FindAllStringSubmatch(line, -1) {
			if msg := docs.resolve(m[1], strings.TrimPrefix(m[2], "#")); msg != "" {
				report("%s", msg)
			}
		}
		if !strings.HasSuffix(file, ".md") {
			continue
		}
		for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
			target, anchor, _ := strings.Cut(m[1], "#")
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			switch {
			case target == "":
				target = file
			case strings.HasSuffix(target, ".md"):
				target = path.Join(path.Dir(file), target)
			default:
				continue // a link to code or a directory: not a document
			}
			if msg := docs.resolve(target, anchor); msg != "" {
				report("%s", msg)
			}
		}
	}
	return problems
}

// headings reads documents' headings once each.
type headings struct {
	root   fs.FS
	byFile map[string]map[string]bool // nil: the file does not exist
}

// resolve returns "" when file exists and, if anchor is not empty, has a heading with
// that anchor; otherwise what is missing.
func (h *headings) resolve(file, anchor string) string {
	anchors, ok := h.byFile[file]
	if !ok {
		data, err := fs.ReadFile(h.root, file)
		if err == nil {
			anchors = anchorsOf(string(data))
		}
		h.byFile[file] = anchors
	}
	switch {
	case anchors == nil:
		return fmt.Sprintf("%s: no such document", file)
	case anchor != "" && !anchors[anchor]:
		return fmt.Sprintf("%s#%s: no such heading", file, anchor)
	}
	return ""
}

// anchorsOf returns the anchors of a Markdown document's headings, as GitHub makes them
// (anchor), a repeated one numbered from -1, outside fenced code blocks.
func anchorsOf(doc string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		a := anchor(text)
		if n := seen[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

// anchor is GitHub's anchor of a heading: lower case, spaces as hyphens, every other
// character but letters, digits, hyphens and underscores dropped.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		}
	}
	return b.String()
}
