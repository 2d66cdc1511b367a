package certs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"

	"github.com/trainyard/trainyard/pkg/kubeclient"
)

// webhookConfig is one named ValidatingWebhookConfiguration or
// MutatingWebhookConfiguration, watched by its own single-object informer.
type webhookConfig struct {
	kind     string
	name     string
	informer cache.SharedIndexInformer
	get      func(context.Context) (runtime.Object, error)
	update   func(context.Context, runtime.Object) error
}

// webhookAPI is the typed client of one kind of webhook configuration.
type webhookAPI[T runtime.Object] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

func newWebhookConfig[T runtime.Object](kind, name string, api webhookAPI[T], informer cache.SharedIndexInformer, opts metav1.UpdateOptions) *webhookConfig {
	return &webhookConfig{
		kind:     kind,
		name:     name,
		informer: informer,
		get:      func(ctx context.Context) (runtime.Object, error) { return api.Get(ctx, name, metav1.GetOptions{}) },
		update: func(ctx context.Context, obj runtime.Object) error {
			_, err := api.Update(ctx, obj.(T), opts)
			return err
		},
	}
}

// newWebhookConfigs returns the webhook configurations named in o, each
// calling changed on every event.
func newWebhookConfigs(client kubeclient.Interface, o *Options, changed func()) ([]*webhookConfig, error) {
	var out []*webhookConfig
	update := metav1.UpdateOptions{FieldManager: o.FieldManager}
	api := client.AdmissionregistrationV1()
	for _, name := range o.ValidatingWebhookConfigurations {
		out = append(out, newWebhookConfig[*admissionregistrationv1.ValidatingWebhookConfiguration]("ValidatingWebhookConfiguration", name,
			api.ValidatingWebhookConfigurations(),
			kubeclient.NewInformer(client, api.ValidatingWebhookConfigurations(), &admissionregistrationv1.ValidatingWebhookConfiguration{}, 0, cache.Indexers{}, byName(name)), update))
	}
	for _, name := range o.MutatingWebhookConfigurations {
		out = append(out, newWebhookConfig[*admissionregistrationv1.MutatingWebhookConfiguration]("MutatingWebhookConfiguration", name,
			api.MutatingWebhookConfigurations(),
			kubeclient.NewInformer(client, api.MutatingWebhookConfigurations(), &admissionregistrationv1.MutatingWebhookConfiguration{}, 0, cache.Indexers{}, byName(name)), update))
	}
	for _, w := range out {
		handler := cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { changed() },
			UpdateFunc: func(any, any) { changed() },
		}
		if _, err := w.informer.AddEventHandler(handler); err != nil {
			return nil, fmt.Errorf("certs: adding the %s event handler: %w", w.kind, err)
		}
	}
	return out, nil
}

// cached returns the configuration from the informer cache, nil when absent.
func (w *webhookConfig) cached() runtime.Object {
	obj, ok, _ := w.informer.GetStore().GetByKey(w.name)
	if !ok {
		return nil
	}
	return obj.(runtime.Object)
}

// caBundles returns the clientConfig.caBundle of every webhook of obj, to
// read or set.
func caBundles(obj runtime.Object) []*[]byte {
	var out []*[]byte
	switch c := obj.(type) {
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		for i := range c.Webhooks {
			out = append(out, &c.Webhooks[i].ClientConfig.CABundle)
		}
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		for i := range c.Webhooks {
			out = append(out, &c.Webhooks[i].ClientConfig.CABundle)
		}
	}
	return out
}

// carries reports whether every webhook of obj has bundle as its caBundle.
func carries(obj runtime.Object, bundle []byte) bool {
	for _, b := range caBundles(obj) {
		if !bytes.Equal(*b, bundle) {
			return false
		}
	}
	return true
}

// published reports whether every existing webhook configuration (as cached)
// carries st's bundle and, with Options.CAPublished, whether the bundle's other
// copies have carried it for CAPublishDelay at now.
func (m *Manager) published(st *state, now time.Time) bool {
	for _, w := range m.webhooks {
		if obj := w.cached(); obj != nil && !carries(obj, st.data[CACertKey]) {
			return false
		}
	}
	if m.opts.CAPublished == nil {
		return true
	}
	since, ok := m.opts.CAPublished(st.data[CACertKey])
	return ok && !now.Before(since.Add(m.opts.CAPublishDelay))
}

// syncWebhooks sets st's bundle as the caBundle of every webhook of the
// configurations that exist and do not carry it already.
//
// A configuration carrying a CA newer than st's active CA means this
// replica's view of the Secret is older than another replica's: the Secret is
// read again, and when it did change, the write waits for the next sync (which
// the read triggers) rather than take the newer CA away.
func (m *Manager) syncWebhooks(ctx context.Context, st *state) error {
	bundle := st.data[CACertKey]
	for _, w := range m.webhooks {
		if obj := w.cached(); obj != nil && !carries(obj, bundle) && newerCA(obj, st) {
			s, err := m.readSecret(ctx)
			if err != nil {
				return err
			}
			if s == nil || !bytes.Equal(s.Data[CACertKey], bundle) {
				m.enqueue()
				return nil
			}
			break
		}
	}
	var errs []error
	for _, w := range m.webhooks {
		if err := m.syncWebhook(ctx, w, bundle); err != nil {
			errs = append(errs, fmt.Errorf("certs: %s %s: %w", w.kind, w.name, err))
		}
	}
	return errors.Join(errs...)
}

// syncWebhook sets bundle as the caBundle of every webhook of w's configuration,
// as cached, by update only: the chart (or register) creates the configurations, and
// this never re-creates one that was deleted. Errors: the update's, after
// maxWriteAttempts conflicts.
func (m *Manager) syncWebhook(ctx context.Context, w *webhookConfig, bundle []byte) error {
	obj := w.cached()
	for attempt := 1; obj != nil && !carries(obj, bundle); attempt++ {
		obj = obj.DeepCopyObject()
		for _, b := range caBundles(obj) {
			*b = bundle
		}
		err := w.update(ctx, obj)
		if err == nil {
			klog.FromContext(ctx).Info("Set the CA bundle", "kind", w.kind, "name", w.name, "webhooks", len(caBundles(obj)))
			return nil
		}
		// Deleted since the cache saw it (helm uninstall while this replica stops):
		// nothing to publish to. An update never creates it again; a configuration
		// created later is an informer add, and synced then.
		if apierrors.IsNotFound(err) {
			klog.FromContext(ctx).V(2).Info("Webhook configuration deleted; no CA bundle to set", "kind", w.kind, "name", w.name)
			return nil
		}
		if !apierrors.IsConflict(err) || attempt == maxWriteAttempts {
			return err
		}
		if obj, err = w.get(ctx); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
	}
	return nil
}

// newerCA reports whether a caBundle of obj holds a CA that is not in st's
// bundle and was issued after st's active CA.
func newerCA(obj runtime.Object, st *state) bool {
	if len(st.bundle) == 0 {
		return false
	}
	active := st.bundle[0]
	for _, b := range caBundles(obj) {
		certs, _ := cert.ParseCertsPEM(*b)
		for _, c := range certs {
			if c.IsCA && c.NotBefore.After(active.NotBefore) && !c.Equal(active) {
				return true
			}
		}
	}
	return false
}
