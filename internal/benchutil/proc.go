package benchutil

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Memory is a process's resident memory, from /proc/<pid>/status (Linux).
type Memory struct {
	RSS  int64 `json:"rss_bytes"`      // VmRSS
	Peak int64 `json:"rss_peak_bytes"` // VmHWM: the largest VmRSS so far
	Anon int64 `json:"rss_anon_bytes"` // RssAnon: the heap and stacks
	File int64 `json:"rss_file_bytes"` // RssFile: mapped files: the executable's code and the WAL
}

// ReadMemory reads pid's resident memory.
func ReadMemory(pid int) (Memory, error) {
	var m Memory
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m, err
	}
	fields := map[string]*int64{"VmRSS": &m.RSS, "VmHWM": &m.Peak, "RssAnon": &m.Anon, "RssFile": &m.File}
	for _, line := range strings.Split(string(raw), "\n") {
		name, value, ok := strings.Cut(line, ":")
		into, want := fields[name]
		if !ok || !want {
			continue
		}
		f := strings.Fields(value)
		if len(f) != 2 || f[1] != "kB" {
			return m, fmt.Errorf("/proc/%d/status: %q", pid, line)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return m, err
		}
		*into = kb << 10
	}
	if m.RSS == 0 {
		return m, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	return m, nil
}

// MappedRSS sums the resident size of pid's mappings of files whose path
// ends in suffix, from /proc/<pid>/smaps (Linux).
func MappedRSS(pid int, suffix string) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return 0, err
	}
	var total int64
	in := false
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			// A mapping's header: address range, perms, offset, dev, inode[, path].
			in = len(f) >= 6 && strings.HasSuffix(f[len(f)-1], suffix)
		case in && len(f) == 3 && f[0] == "Rss:" && f[2] == "kB":
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/smaps: %q", pid, line)
			}
			total += kb << 10
		}
	}
	return total, nil
}
