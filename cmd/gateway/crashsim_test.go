package main

// A power-loss simulator for the embedded server's data directory, for
// TestPowerLossKeepsAcknowledged. The process storing the files runs under
// strace, which records every system call that writes, syncs, renames or
// removes a file. Replaying that record gives, at any point of the run,
// two states of the directory:
//
//   - live: every write so far (what a crash of the process leaves: the
//     page cache survives it);
//   - synced: each file as it was when its last successful fsync or
//     fdatasync (or syncfs of the filesystem) began, or as written when it
//     was opened with O_SYNC or O_DSYNC (what a power loss is sure to
//     leave).
//
// The synced state is the worst case the kernel allows for file contents:
// any write not covered by a sync is dropped. Directory entries (create,
// rename, unlink) are taken as durable at once, as the ext4 journal orders
// them before the data of the files they name; the NATS server syncs its
// directories where it relies on a rename. So the simulation checks that
// the server syncs the data it acknowledged, not that it syncs directory
// entries; and it shows one bad case, not every reordering a disk may do.

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// traceSyscalls is strace's -e trace= list: every call the replay needs.
// writev and pwritev are listed so that one on a tracked file fails the
// replay instead of being missed.
const traceSyscalls = "openat,open,creat,close,write,pwrite64,writev,pwritev,pwritev2,fsync,fdatasync,syncfs,sync," +
	"rename,renameat,renameat2,unlink,unlinkat,ftruncate,truncate,lseek,dup,dup2,dup3"

// strace's arguments to record a child process for replayTrace.
func straceArgs(out string) []string {
	return []string{"-f", "-qq", "-xx", "-s", "67108864", "-o", out, "-e", "trace=" + traceSyscalls}
}

// diskFile is one file of the replayed directory.
type diskFile struct {
	live   []byte
	synced []byte
}

// openFile is an open file descriptor of the traced process.
type openFile struct {
	path string    // as opened: resolves the *at calls' relative paths
	f    *diskFile // nil for a directory; follows renames, outlives unlinks
	pos  int64
	sync bool // opened with O_SYNC or O_DSYNC
}

// diskState replays a trace: the files under root by path, the traced
// process's descriptors, and the syncs that began but have not returned.
type diskState struct {
	root    string
	files   map[string]*diskFile
	fds     map[int]*openFile
	syncing map[string][]byte // by pid: the live content when the sync began
	// syncingAll is, by pid, every file's live content when a syncfs began.
	syncingAll map[string]map[*diskFile][]byte
	// onStdout sees what the traced process writes to its standard output.
	onStdout func(s *diskState, data []byte)
}

// snapshot is a copy of the directory's files, by path relative to root.
type snapshot map[string][]byte

// state copies the live or the synced contents of every file.
func (s *diskState) state(synced bool) snapshot {
	out := make(snapshot, len(s.files))
	for p, f := range s.files {
		rel, _ := filepath.Rel(s.root, p)
		b := f.live
		if synced {
			b = f.synced
		}
		out[rel] = append([]byte(nil), b...)
	}
	return out
}

// writeTo makes dir hold the snapshot's files.
func (sn snapshot) writeTo(dir string) error {
	for rel, b := range sn {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// replayTrace reads strace's output (straceArgs) for a process writing
// under root and calls s.onStdout at each write to standard output.
func replayTrace(r io.Reader, root string, onStdout func(*diskState, []byte)) (*diskState, error) {
	s := &diskState{root: filepath.Clean(root), files: map[string]*diskFile{}, fds: map[int]*openFile{},
		syncing: map[string][]byte{}, syncingAll: map[string]map[*diskFile][]byte{}, onStdout: onStdout}
	pending := map[string]string{} // by pid: the start of an unfinished call
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		pid, rest, ok := strings.Cut(line, " ")
		rest = strings.TrimLeft(rest, " ") // strace pads the pid column
		if !ok || strings.HasPrefix(rest, "---") || strings.HasPrefix(rest, "+++") {
			continue
		}
		if head, ok := strings.CutSuffix(rest, " <unfinished ...>"); ok {
			pending[pid] = head
			if err := s.begin(pid, head); err != nil {
				return nil, fmt.Errorf("trace line %d: %w", n, err)
			}
			continue
		}
		if strings.HasPrefix(rest, "<... ") {
			_, tail, ok := strings.Cut(rest, " resumed>")
			head, had := pending[pid]
			if !ok || !had {
				return nil, fmt.Errorf("trace line %d: resumed call without its start: %q", n, line)
			}
			delete(pending, pid)
			rest = head + tail
		} else if err := s.begin(pid, rest); err != nil {
			return nil, fmt.Errorf("trace line %d: %w", n, err)
		}
		if err := s.apply(pid, rest); err != nil {
			return nil, fmt.Errorf("trace line %d: %w", n, err)
		}
	}
	return s, sc.Err()
}

// parseCall splits `name(arg, arg) = rc ...` into its parts; rc is -1 for
// a call that failed or has no result.
func parseCall(call string) (name string, args []string, rc int64, err error) {
	name, rest, ok := strings.Cut(call, "(")
	if !ok {
		return "", nil, 0, fmt.Errorf("not a call: %q", call)
	}
	// With -xx, strings hold only \xHH escapes: no quote or comma inside.
	i, start, inStr := 0, 0, false
	for ; i < len(rest); i++ {
		switch c := rest[i]; {
		case c == '"':
			inStr = !inStr
		case inStr:
		case c == ',':
			args = append(args, strings.TrimSpace(rest[start:i]))
			start = i + 1
		case c == ')':
			if a := strings.TrimSpace(rest[start:i]); a != "" {
				args = append(args, a)
			}
			goto result
		}
	}
	return name, args, -1, nil // no result (a call the kill cut short)
result:
	res := strings.TrimSpace(rest[i+1:])
	res, ok = strings.CutPrefix(res, "= ")
	if !ok {
		return name, args, -1, nil
	}
	f, _, _ := strings.Cut(res, " ")
	rc, err = strconv.ParseInt(f, 0, 64)
	if err != nil {
		return name, args, -1, nil // "?" and the like
	}
	return name, args, rc, nil
}

// unquote decodes a -xx string argument.
func unquote(a string) ([]byte, error) {
	if strings.HasSuffix(a, `"...`) {
		return nil, fmt.Errorf("string argument cut short: raise strace -s")
	}
	a = strings.TrimPrefix(strings.TrimSuffix(a, `"`), `"`)
	return hex.DecodeString(strings.ReplaceAll(a, `\x`, ""))
}

// begin sees a call start: a sync takes its snapshot of the file here, so
// writes that finish while it runs are not counted as synced.
func (s *diskState) begin(pid, call string) error {
	name, args, _, err := parseCall(call)
	if err == nil && (name == "syncfs" || name == "sync") {
		all := make(map[*diskFile][]byte, len(s.files))
		for _, f := range s.files {
			all[f] = append([]byte(nil), f.live...)
		}
		s.syncingAll[pid] = all
		return nil
	}
	if err != nil || (name != "fsync" && name != "fdatasync") || len(args) < 1 {
		return err
	}
	fd, _ := strconv.Atoi(args[0])
	if of := s.fds[fd]; of != nil && of.f != nil {
		s.syncing[pid] = append([]byte(nil), of.f.live...)
	}
	return nil
}

// path resolves a path argument against a directory descriptor argument,
// "" for one outside root.
func (s *diskState) path(dirArg, pathArg string) (string, error) {
	b, err := unquote(pathArg)
	if err != nil {
		return "", err
	}
	p := string(b)
	if !filepath.IsAbs(p) {
		if dirArg == "AT_FDCWD" {
			return "", nil // the tests' files are absolute; others are not ours
		}
		fd, _ := strconv.Atoi(dirArg)
		of := s.fds[fd]
		if of == nil {
			return "", nil
		}
		p = filepath.Join(of.path, p)
	}
	p = filepath.Clean(p)
	if p != s.root && !strings.HasPrefix(p, s.root+string(filepath.Separator)) {
		return "", nil
	}
	return p, nil
}

// apply replays one finished call.
func (s *diskState) apply(pid, call string) error {
	name, args, rc, err := parseCall(call)
	if err != nil {
		return err
	}
	if name == "syncfs" || name == "sync" {
		// The tests' files are on one filesystem: a syncfs of any of
		// them covers all.
		all := s.syncingAll[pid]
		delete(s.syncingAll, pid)
		if rc == 0 || name == "sync" {
			for f, b := range all {
				f.synced = b
			}
		}
		return nil
	}
	if name == "fsync" || name == "fdatasync" {
		snap, began := s.syncing[pid]
		delete(s.syncing, pid)
		fd, _ := strconv.Atoi(args[0])
		if of := s.fds[fd]; began && rc == 0 && of != nil && of.f != nil {
			of.f.synced = snap
		}
		return nil
	}
	if rc < 0 {
		return nil
	}
	fdArg := func(i int) *openFile {
		if i >= len(args) {
			return nil
		}
		fd, _ := strconv.Atoi(args[i])
		return s.fds[fd]
	}
	switch name {
	case "openat", "open", "creat":
		dir, pa, flags := "AT_FDCWD", args[0], ""
		if name == "openat" {
			dir, pa = args[0], args[1]
			if len(args) > 2 {
				flags = args[2]
			}
		} else if len(args) > 1 {
			flags = args[1]
		}
		if name == "creat" {
			flags = "O_CREAT|O_TRUNC"
		}
		p, err := s.path(dir, pa)
		if err != nil || p == "" {
			delete(s.fds, int(rc))
			return err
		}
		of := &openFile{path: p, sync: strings.Contains(flags, "O_SYNC") || strings.Contains(flags, "O_DSYNC")}
		s.fds[int(rc)] = of
		if !strings.Contains(flags, "O_DIRECTORY") {
			f := s.files[p]
			if f == nil && strings.Contains(flags, "O_CREAT") {
				f = &diskFile{}
				s.files[p] = f
			}
			if f != nil && strings.Contains(flags, "O_TRUNC") {
				f.live = nil
			}
			of.f = f
		}
	case "close":
		fd, _ := strconv.Atoi(args[0])
		delete(s.fds, fd)
	case "dup", "dup2", "dup3":
		if of := fdArg(0); of != nil {
			s.fds[int(rc)] = &openFile{path: of.path, f: of.f, pos: of.pos, sync: of.sync}
		} else {
			delete(s.fds, int(rc))
		}
	case "write", "pwrite64":
		if args[0] == "1" && name == "write" && s.onStdout != nil {
			b, err := unquote(args[1])
			if err != nil {
				return err
			}
			s.onStdout(s, b[:rc])
			return nil
		}
		of := fdArg(0)
		if of == nil || of.f == nil {
			return nil
		}
		b, err := unquote(args[1])
		if err != nil {
			return err
		}
		b = b[:rc]
		at := of.pos
		if name == "pwrite64" {
			at, _ = strconv.ParseInt(args[3], 0, 64)
		} else {
			of.pos += rc
		}
		f := of.f
		f.live = writeAt(f.live, b, at)
		if of.sync {
			f.synced = append([]byte(nil), f.live...)
		}
	case "writev", "pwritev", "pwritev2":
		if of := fdArg(0); of != nil && of.f != nil {
			return fmt.Errorf("%s on %s: the replay does not follow vector writes", name, of.path)
		}
	case "lseek":
		if of := fdArg(0); of != nil {
			of.pos = rc
		}
	case "ftruncate":
		if of := fdArg(0); of != nil && of.f != nil {
			n, _ := strconv.ParseInt(args[1], 0, 64)
			of.f.live = resize(of.f.live, n)
		}
	case "truncate":
		p, err := s.path("AT_FDCWD", args[0])
		if err != nil {
			return err
		}
		if f := s.files[p]; f != nil {
			n, _ := strconv.ParseInt(args[1], 0, 64)
			f.live = resize(f.live, n)
		}
	case "rename", "renameat", "renameat2":
		var from, to string
		if name == "rename" {
			from, err = s.path("AT_FDCWD", args[0])
			if err == nil {
				to, err = s.path("AT_FDCWD", args[1])
			}
		} else {
			from, err = s.path(args[0], args[1])
			if err == nil {
				to, err = s.path(args[2], args[3])
			}
		}
		if err != nil {
			return err
		}
		if from == "" {
			return nil
		}
		// A file, or a directory with everything under it.
		for path, f := range maps.Clone(s.files) {
			rel, ok := strings.CutPrefix(path, from)
			if !ok || (rel != "" && rel[0] != filepath.Separator) {
				continue
			}
			delete(s.files, path)
			if to != "" {
				s.files[to+rel] = f
			}
		}
	case "unlink", "unlinkat":
		dir, pa := "AT_FDCWD", args[0]
		if name == "unlinkat" {
			dir, pa = args[0], args[1]
		}
		p, err := s.path(dir, pa)
		if err != nil {
			return err
		}
		delete(s.files, p)
		for path := range maps.Clone(s.files) {
			if strings.HasPrefix(path, p+string(filepath.Separator)) {
				delete(s.files, path)
			}
		}
	}
	return nil
}

// writeAt writes b into buf at off, growing it (with zeros) as needed.
func writeAt(buf, b []byte, off int64) []byte {
	if end := off + int64(len(b)); end > int64(len(buf)) {
		buf = resize(buf, end)
	}
	copy(buf[off:], b)
	return buf
}

func resize(buf []byte, n int64) []byte {
	if n <= int64(len(buf)) {
		return buf[:n]
	}
	return append(buf, make([]byte, n-int64(len(buf)))...)
}
