package images

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// EnvDebianMirror overrides the Debian mirrors read from the machine's apt
// configuration: entries separated by ";" or newlines, each "URI" (used with
// the recipe's suite) or "URI SUITE..." (those suites as given), e.g.
// "http://mirror.example/debian; http://mirror.example/debian-security bookworm-security".
const EnvDebianMirror = "TRAINYARD_DEBIAN_MIRROR"

// AptSource is one Debian archive to build from: packages of Suite (a release
// and pocket, e.g. "bookworm" or "bookworm-security") at URI, component main.
type AptSource struct {
	URI, Suite string
}

// Line is the source as a one-line sources.list entry, as mmdebstrap takes a
// mirror argument.
func (s AptSource) Line() string { return "deb " + s.URI + " " + s.Suite + " main" }

// Default locations of the apt configuration read by [DebianSources].
const (
	aptSourcesList = "/etc/apt/sources.list"
	aptSourcesDir  = "/etc/apt/sources.list.d"
)

// DebianSources returns the archives to build images of suite (a release
// codename such as "bookworm") from: $TRAINYARD_DEBIAN_MIRROR when set, else
// the machine's apt sources (/etc/apt/sources.list one-line entries and
// /etc/apt/sources.list.d/*.list and *.sources), each "deb" entry's suite
// moved to the same pocket of suite: "trixie-security" becomes
// "bookworm-security", so a machine of another release still names the right
// archives. Only the release itself and its -updates and -security pockets are
// kept (no backports, no proposed updates). It fails when no source is found.
func DebianSources(suite string) ([]AptSource, error) {
	if v := os.Getenv(EnvDebianMirror); strings.TrimSpace(v) != "" {
		return parseMirrorOverride(v, suite), nil
	}
	var entries []aptEntry
	if data, err := os.ReadFile(aptSourcesList); err == nil {
		entries = append(entries, parseOneLine(string(data))...)
	}
	for _, pattern := range []string{"*.list", "*.sources"} {
		files, _ := filepath.Glob(filepath.Join(aptSourcesDir, pattern))
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				return nil, fmt.Errorf("reading apt sources: %w", err)
			}
			if strings.HasSuffix(file, ".sources") {
				entries = append(entries, parseDeb822(string(data))...)
			} else {
				entries = append(entries, parseOneLine(string(data))...)
			}
		}
	}
	srcs := sourcesFor(entries, suite)
	if len(srcs) == 0 {
		return nil, fmt.Errorf("no Debian archive in %s or %s/*: set %s to a mirror's URI",
			aptSourcesList, aptSourcesDir, EnvDebianMirror)
	}
	return srcs, nil
}

// aptEntry is one "deb" source of the apt configuration: a URI, its suites and
// components.
type aptEntry struct {
	uri                string
	suites, components []string
}

// parseOneLine reads sources.list's one-line format:
// "deb [opt=val ...] URI SUITE [COMPONENT...]"; deb-src lines and comments are
// skipped.
func parseOneLine(text string) []aptEntry {
	var entries []aptEntry
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 3 || fields[0] != "deb" {
			continue
		}
		fields = fields[1:]
		if strings.HasPrefix(fields[0], "[") { // options, possibly spanning fields
			for len(fields) > 0 && !strings.HasSuffix(fields[0], "]") {
				fields = fields[1:]
			}
			if len(fields) > 0 {
				fields = fields[1:]
			}
		}
		if len(fields) >= 2 {
			entries = append(entries, aptEntry{uri: fields[0], suites: fields[1:2], components: fields[2:]})
		}
	}
	return entries
}

// parseDeb822 reads the deb822 format of *.sources: paragraphs separated by
// blank lines with Types, URIs and Suites fields (each possibly listing
// several values, possibly continued on indented lines); paragraphs without
// type "deb" or with "Enabled: no" are skipped.
func parseDeb822(text string) []aptEntry {
	var entries []aptEntry
	fields := map[string]string{}
	var last string
	flush := func() {
		if slices.Contains(strings.Fields(fields["types"]), "deb") && !strings.EqualFold(fields["enabled"], "no") {
			for _, uri := range strings.Fields(fields["uris"]) {
				entries = append(entries, aptEntry{
					uri: uri, suites: strings.Fields(fields["suites"]), components: strings.Fields(fields["components"]),
				})
			}
		}
		clear(fields)
		last = ""
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case strings.HasPrefix(line, "#"):
		case line[0] == ' ' || line[0] == '\t':
			if last != "" { // continuation of the previous field
				fields[last] += " " + strings.TrimSpace(line)
			}
		default:
			key, value, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			last = strings.ToLower(strings.TrimSpace(key))
			fields[last] = strings.TrimSpace(value)
		}
	}
	flush()
	return entries
}

// sourcesFor maps the suites of every entry with component main onto suite,
// keeping the release, -updates and -security pockets, without duplicates, in
// the order found. Other archives (a vendor's repository of its own suite or
// components) and flat repositories ("./") are left out.
func sourcesFor(entries []aptEntry, suite string) []AptSource {
	var srcs []AptSource
	for _, e := range entries {
		if !slices.Contains(e.components, "main") {
			continue
		}
		for _, s := range e.suites {
			_, pocket, _ := strings.Cut(s, "-")
			if strings.Contains(s, "/") || pocket != "" && pocket != "updates" && pocket != "security" {
				continue
			}
			src := AptSource{URI: strings.TrimSuffix(e.uri, "/"), Suite: suite}
			if pocket != "" {
				src.Suite += "-" + pocket
			}
			if !slices.Contains(srcs, src) {
				srcs = append(srcs, src)
			}
		}
	}
	return srcs
}

// parseMirrorOverride reads $TRAINYARD_DEBIAN_MIRROR (see [EnvDebianMirror]).
func parseMirrorOverride(v, suite string) []AptSource {
	var srcs []AptSource
	for _, entry := range strings.FieldsFunc(v, func(r rune) bool { return r == ';' || r == '\n' }) {
		fields := strings.Fields(entry)
		if len(fields) == 0 {
			continue
		}
		uri := strings.TrimSuffix(fields[0], "/")
		if len(fields) == 1 {
			fields = append(fields, suite)
		}
		for _, s := range fields[1:] {
			srcs = append(srcs, AptSource{URI: uri, Suite: s})
		}
	}
	return srcs
}
