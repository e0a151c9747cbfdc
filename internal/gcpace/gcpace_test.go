package gcpace

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, headroom uint64
		want           int
	}{
		{0, 48 * mib, MaxPercent},
		{6 * mib, 48 * mib, MaxPercent}, // 800 % is past the bound
		{12 * mib, 48 * mib, 400},
		{24 * mib, 48 * mib, 200},
		{32 * mib, 48 * mib, 150},
		{48 * mib, 48 * mib, MinPercent},
		{200 * mib, 48 * mib, MinPercent}, // never below Go's default
	} {
		if got := Percent(c.live, c.headroom); got != c.want {
			t.Errorf("Percent(%d MiB, %d MiB) = %d, want %d", c.live/mib, c.headroom/mib, got, c.want)
		}
	}
}

// gcPercent reads the collector's percentage.
func gcPercent() int {
	p := debug.SetGCPercent(MinPercent)
	debug.SetGCPercent(p)
	return p
}

func TestPacerSetsThePercentAfterACollection(t *testing.T) {
	paced := make(chan int, 4)
	p := start(1<<40, paced) // a headroom no test heap reaches: MaxPercent
	defer p.Stop()
	runtime.GC()
	select {
	case got := <-paced:
		if got != MaxPercent {
			t.Fatalf("paced %d, want %d", got, MaxPercent)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no percentage set within 10s of a collection")
	}
	if got := gcPercent(); got != MaxPercent {
		t.Fatalf("GC percent %d after pacing, want %d", got, MaxPercent)
	}
	p.Stop()
	if got := gcPercent(); got != MinPercent {
		t.Fatalf("GC percent %d after Stop, want %d", got, MinPercent)
	}
	runtime.GC()
	runtime.GC()
	if got := gcPercent(); got != MinPercent {
		t.Fatalf("GC percent %d after collections past Stop, want %d", got, MinPercent)
	}
}

func TestStartLeavesAnOperatorsGOGC(t *testing.T) {
	t.Setenv("GOGC", "150")
	if p := Start(DefaultHeadroom); p != nil {
		p.Stop()
		t.Fatal("Start paced the collector although GOGC is set")
	}
	t.Setenv("GOGC", "") // the runtime reads it as unset
	p := Start(DefaultHeadroom)
	if p == nil {
		t.Fatal("Start left the collector alone under an empty GOGC")
	}
	p.Stop()
}
