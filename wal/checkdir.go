package wal

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// CheckDir reports, without creating or locking anything, why Open could
// not open the log in dir: dir (or the nearest of its parents that exists,
// which Open would create it in) is not a directory this process may
// write, or the log file there is not a regular file it may read and
// write. It is for check-config, which must not take the lock of a
// running service.
func CheckDir(dir string) error {
	for p := filepath.Clean(dir); ; {
		st, err := os.Stat(p)
		switch {
		case err == nil && !st.IsDir():
			return fmt.Errorf("data dir %s: %s is not a directory", dir, p)
		case err == nil:
			if err := unix.Access(p, unix.W_OK|unix.X_OK); err != nil {
				return fmt.Errorf("data dir %s: cannot write in %s: %w", dir, p, err)
			}
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("data dir %s: %w", dir, err)
		}
		if err == nil {
			break
		}
		parent := filepath.Dir(p)
		if parent == p {
			return fmt.Errorf("data dir %s: no parent of it exists", dir)
		}
		p = parent
	}
	file := filepath.Join(dir, FileName)
	st, err := os.Stat(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("data dir %s: %w", dir, err)
	case !st.Mode().IsRegular():
		return fmt.Errorf("data dir %s: %s is not a regular file", dir, file)
	}
	if err := unix.Access(file, unix.R_OK|unix.W_OK); err != nil {
		return fmt.Errorf("data dir %s: cannot read and write %s: %w", dir, file, err)
	}
	return nil
}
