package server

import (
	"context"
	"os"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/contractrefine/autonomy/internal/bundle"
	"github.com/contractrefine/autonomy/internal/metrics"
)

// Reload triggers, the trigger field of the reload log lines.
const (
	TriggerSignal     = "sighup"
	TriggerFileChange = "file_change"
)

// Reload loads the configured bundle again and, if it loads, swaps it in
// atomically: a check or preflight already running finishes under the
// bundle it started with, and every later one sees the new bundle whole.
// A bundle that does not load is refused, the error is logged and
// returned, and the loaded bundle keeps serving. Reloads are serialised.
func (s *Server) Reload(ctx context.Context, trigger string) error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	old := s.bundle.Load()
	b, err := LoadBundle(ctx, &s.cfg)
	if err != nil {
		s.obs.metrics.BundleReload(metrics.ReloadFailed)
		s.log.ErrorContext(ctx, "bundle reload refused; the loaded bundle keeps serving", "trigger", trigger,
			"bundle", old.Source(), "bundle_revision", old.Revision(), "err", err)
		return err
	}
	if b.Revision() == old.Revision() {
		old.ForgetAnswers()
		s.obs.metrics.BundleReload(metrics.ReloadUnchanged)
		s.log.InfoContext(ctx, "bundle unchanged", "trigger", trigger, "bundle", b.Source(),
			"bundle_revision", b.Revision(), "old_bundle_revision", old.Revision())
		return nil
	}
	s.bundle.Store(b)
	s.obs.metrics.SetBundle(b.Revision(), b.Source())
	s.obs.metrics.BundleReload(metrics.ReloadOK)
	s.log.InfoContext(ctx, "bundle reloaded", "trigger", trigger, "bundle", b.Source(),
		"old_bundle_revision", old.Revision(), "bundle_revision", b.Revision())
	// Readiness follows the new policy at once, not at the next background
	// probe: unready when it cannot decide, ready again when the one before
	// could not. (A probe also commits to the WAL, so it is not run for
	// every reload.)
	if !s.ready.Load() || b.Decides(ctx, string(s.cfg.ContractRefine.Mode), s.cfg.Gate.Path) != nil {
		s.probe(ctx)
	}
	return nil
}

// BundleRevision returns the revision of the bundle being served.
func (s *Server) BundleRevision() string { return s.bundle.Load().Revision() }

// ServeReloads reloads the bundle on every signal received until ctx ends;
// the command line feeds it SIGHUP.
func (s *Server) ServeReloads(ctx context.Context, signals <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-signals:
			s.Reload(ctx, TriggerSignal)
		}
	}
}

// watchBundle reloads the bundle directory when files in it change (with
// reload.watch, and only for a bundle directory: the embedded default never
// changes). Events are debounced: the reload runs once the directory has
// been quiet for reload.debounce, so an update that writes several files,
// or one file in several quick writes, is loaded once and whole. A file
// caught half-written is refused when the cut breaks its syntax, and the
// next event retries; a YAML file cut at a line end still parses, so
// bundle files must be replaced whole (docs/OPERATIONS.md).
// Replacing the directory itself ends the watch; SIGHUP still reloads.
func (s *Server) watchBundle(ctx context.Context) {
	if s.cfg.Bundle == "" || !s.cfg.Reload.Watch {
		return
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		s.log.Error("bundle watch unavailable; reload with SIGHUP", "err", err)
		return
	}
	defer w.Close()
	if err := watchTree(w, s.cfg.Bundle); err != nil {
		s.log.Error("bundle watch unavailable; reload with SIGHUP", "bundle", s.cfg.Bundle, "err", err)
		return
	}
	debounce := s.cfg.Reload.Debounce
	timer := time.NewTimer(debounce)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			// A chmod is a change too: it can make a file that was refused
			// (unreadable) readable. A touch reloads as "unchanged".
			if ev.Has(fsnotify.Create) {
				// A new subdirectory (the OPA loader reads the tree) or a
				// Kubernetes ConfigMap's swapped ..data link.
				if st, err := os.Stat(ev.Name); err == nil && st.IsDir() {
					if err := watchTree(w, ev.Name); err != nil {
						s.log.Warn("bundle watch: cannot watch new directory", "dir", ev.Name, "err", err)
					}
				}
			}
			timer.Reset(debounce)
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			s.log.Warn("bundle watch error", "err", err)
		case <-timer.C:
			s.Reload(ctx, TriggerFileChange)
		}
	}
}

// watchTree watches dir and every directory below it that the bundle
// loader reads (bundle.Dirs): through symbolic links to directories (a
// linked-in shared directory is part of the bundle), not into hidden ones
// (the loader skips them; a ConfigMap's ..data swap shows in dir itself).
func watchTree(w *fsnotify.Watcher, dir string) error {
	dirs, err := bundle.Dirs(dir)
	if err != nil {
		return err
	}
	for _, d := range dirs {
		if err := w.Add(d); err != nil {
			return err
		}
	}
	return nil
}
