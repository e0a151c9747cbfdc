package etcdstore

import (
	"errors"
	"slices"

	"github.com/contractrefine/autonomy/wal"
)

// Refusals while the log is held. After a commit whose frames' copies may
// be in etcd fails, the log takes no frame until the copies are settled
// (settle.go): its next frame would take one of their seqs. A 503 refusal
// answered meanwhile names an audit id in its body; its frame waits here
// and is appended once the log is released, so that id is found in the
// audit then. A refusal's frame is not durable before its answer anyway
// (AppendRefusal): the answer is a 503 whatever is recorded. A process
// that dies while held loses the waiting frames; its `decision` log lines
// still name each refusal.

// maxHeldRefusals bounds the refusal frames kept while the log is held:
// a long hold under load would otherwise grow them without limit. Past it
// they are counted and dropped, and the count is logged.
const maxHeldRefusals = 4096

// heldChunk is how many held frames are appended in one commit, and copied
// in one request: well under etcd's request size.
const heldChunk = 256

// holdRefusal keeps in's frame to append once the log is released. The
// release may have come between the log's refusal and this: its
// appendHeldRefusals then found nothing, so this one appends it.
// (Release comes before the released side takes refusalsMu: either that
// call sees in, or this sees the log released.)
func (s *Store) holdRefusal(in wal.FrameInput) {
	s.refusalsMu.Lock()
	if len(s.heldRefusals) < maxHeldRefusals {
		s.heldRefusals = append(s.heldRefusals, in)
	} else {
		s.refusalsDropped++
	}
	s.refusalsMu.Unlock()
	if !errors.Is(s.log.Refuses(), wal.ErrHeld) {
		go s.appendHeldRefusals()
	}
}

// requeueRefusals puts ins back before the refusals held since, within
// maxHeldRefusals.
func (s *Store) requeueRefusals(ins []wal.FrameInput) {
	s.refusalsMu.Lock()
	defer s.refusalsMu.Unlock()
	all := slices.Concat(ins, s.heldRefusals)
	if len(all) > maxHeldRefusals {
		s.refusalsDropped += len(all) - maxHeldRefusals
		all = all[:maxHeldRefusals]
	}
	s.heldRefusals = all
}

// appendHeldRefusals appends the frames held refusals left, once the log
// takes frames again, in the order their refusals were answered. Those a
// failed commit leaves (the log held anew, or a write that failed) wait
// for the next release; a log that is closed or not trusted takes none
// again, and they are dropped with an error line.
func (s *Store) appendHeldRefusals() {
	s.refusalsMu.Lock()
	ins, dropped := s.heldRefusals, s.refusalsDropped
	s.heldRefusals, s.refusalsDropped = nil, 0
	s.refusalsMu.Unlock()
	if dropped > 0 {
		s.logger.Warn("etcd: refusals answered while the log was held were more than it keeps; their decision frames are not written (their decision log lines name them)",
			"dropped", dropped, "kept", len(ins))
	}
	for len(ins) > 0 {
		chunk := ins[:min(len(ins), heldChunk)]
		frames, err := s.logRefusals(s.bg, chunk)
		if err != nil {
			if errors.Is(err, wal.ErrClosed) || s.log.Trusted() != nil || s.bg.Err() != nil {
				s.logger.Error("etcd: cannot write the decision frames of refusals answered while the log was held", "frames", len(ins), "err", err)
				return
			}
			s.requeueRefusals(ins)
			return
		}
		s.logger.Info("etcd: refusals answered while the log was held are recorded", "frames", len(frames))
		ins = ins[len(chunk):]
	}
}
