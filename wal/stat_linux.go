package wal

import "golang.org/x/sys/unix"

// statID names the file at path by device and inode. It asks statx(2)
// for the inode number alone. A stat(2), which returns the file's times,
// marks them as read, and Linux (6.13 on, multigrain timestamps) then
// gives the next write a fine-grained time: the inode changes on every
// commit, and the commit's first fdatasync writes it as well as the pages
// (a second device write the commit waits for). Unread, the times stay
// coarse (a clock tick), and most commits find the inode unchanged.
func statID(path string) (fileID, error) {
	var st unix.Statx_t
	for {
		err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_INO, &st)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.ENOSYS || err == unix.EPERM:
			return statPathID(path) // before Linux 4.11, or a filter refusing statx
		case err != nil:
			return fileID{}, err
		case st.Mask&unix.STATX_INO == 0:
			return statPathID(path)
		}
		return fileID{dev: unix.Mkdev(st.Dev_major, st.Dev_minor), ino: st.Ino}, nil
	}
}
