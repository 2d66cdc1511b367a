package progress

import (
	"bytes"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/trainyard/trainyard/pkg/progress/wire"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// publishedBundle remembers since when a CAPublisher has seen one bundle in every CA
// ConfigMap (Published).
type publishedBundle struct {
	mu     sync.Mutex
	bundle []byte
	since  time.Time
}

// Published reports whether every CA ConfigMap the publisher keeps carries bundle, as
// its cache shows: one in each namespace with TrainJobs, and each one it keeps current
// in namespaces without; and since when it has first seen that (a time of this process's
// clock, time.Now, measured from the first call that found it so). The serving
// certificate's Manager calls it (certs.Options.CAPublished) before it serves a
// certificate signed by a new CA: a trainer pod whose mounted ca.crt lacks the new CA
// would refuse the progress server's certificate, losing every report. It returns
// false before Run's cache has synced and after Run returned — on a follower, which
// keeps no ConfigMaps, always — and while any ConfigMap lags, e.g. in a namespace whose
// writes the API server refuses (the failed syncs are logged); a rotation then waits
// until that is fixed, or until the old CA expires.
func (p *CAPublisher) Published(bundle []byte) (since time.Time, ok bool) {
	if len(bundle) == 0 || !p.running.Load() || !p.informer.HasSynced() || !p.carries(bundle) {
		p.published.mu.Lock()
		p.published.bundle = nil
		p.published.mu.Unlock()
		return time.Time{}, false
	}
	p.published.mu.Lock()
	defer p.published.mu.Unlock()
	if !bytes.Equal(p.published.bundle, bundle) {
		p.published.bundle, p.published.since = bytes.Clone(bundle), time.Now()
	}
	return p.published.since, true
}

// carries reports whether the cache shows bundle in the CA ConfigMap of every
// namespace with TrainJobs and in every CA ConfigMap it holds, system namespaces
// (trainjob.SystemNamespaces) aside: it keeps none there, so a TrainJob or an old CA
// ConfigMap in one must not hold a rotation back.
func (p *CAPublisher) carries(bundle []byte) bool {
	for _, ns := range p.opts.TrainJobs.Namespaces() {
		if trainjob.IsSystemNamespace(ns) {
			continue
		}
		if cm, err := p.cached(ns); err != nil || cm == nil || !upToDate(cm, bundle) {
			return false
		}
	}
	for _, key := range p.informer.GetStore().ListKeys() {
		ns, name, err := cache.SplitMetaNamespaceKey(key)
		if err != nil || name != wire.CAConfigMapName || trainjob.IsSystemNamespace(ns) {
			continue
		}
		if cm, err := p.cached(ns); err != nil || cm == nil || !upToDate(cm, bundle) {
			return false
		}
	}
	return true
}
