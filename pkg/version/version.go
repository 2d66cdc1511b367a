// Package version reports the build's version, set at link time by the Makefile
// (-ldflags -X). Unset values read "dev" and "unknown".
package version

// Version is the release or `git describe` of the build; GitCommit its commit hash.
var (
	Version   = "dev"
	GitCommit = "unknown"
)
