package cluster

import (
	"context"
	"io"
)

// DefaultCacheDir is the cache root [Build] uses when BuildOptions.CacheDir is
// empty: $TRAINYARD_CACHE_DIR, else $HOME/.cache/trainyard, else
// <repoRoot>/_output/cache. Other caches of the e2e harness (package
// e2e/images) live beside the binaries' bin/ folder under the same root.
func DefaultCacheDir(repoRoot string) string { return defaultCacheDir(repoRoot) }

// LockFile takes an exclusive flock on path (created, with its folder, if
// missing), as [Build] does to serialise builds into one cache between
// processes: it polls until the lock is free or ctx ends, saying once on
// progress that it waits. The returned func releases the lock.
func LockFile(ctx context.Context, path string, progress io.Writer) (func(), error) {
	if progress == nil {
		progress = io.Discard
	}
	return lockFile(ctx, path, progress)
}
