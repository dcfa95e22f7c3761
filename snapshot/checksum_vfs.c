/*
** The `diskless-checksums` SQLite VFS, in C: every page of a coordinator's state verified when read.
**
** Why C: the same checks written as an apsw VFS in Python made every file operation of every SQLite call
** (each write, lock, shared-memory barrier of the writer, the checkpointer and the readers) take the
** interpreter lock from the thread that asked for it: three times the futex calls of the node without them,
** a fifth of its commit rate and a quarter of its FindBatches rate (issue #37). Here nothing of a file
** operation enters Python; a damaged page's description waits, per thread, for the Python caller that got
** SQLITE_IOERR_DATA (snapshot/page_checksums.py names the damage with it).
**
** What it checks, over the platform's default VFS ("unix"):
** - Database files (SQLITE_OPEN_MAIN_DB) whose header says each page reserves 8 bytes: the checksum of
**   SQLite's cksumvfs (ext/misc/cksumvfs.c, same algorithm and byte layout, so a file written here is read
**   by cksumvfs and the other way round) is written into the last 8 bytes of each page written and verified
**   on each page read. A file that once said 8 never loses its checksums: a header saying otherwise after
**   that is damage (a flipped bit there would turn the checks off).
** - WAL files: SQLite checks a frame's running checksum only when it recovers the WAL after a crash, never
**   when it reads a page from it, and a checkpoint would copy a flipped page into the database file under
**   a fresh page checksum. So each page read from the WAL is checked against its frame's checksum (the
**   frame's first 8 header bytes and its page, chained from the previous frame's stored checksum, or the
**   WAL header's for the first frame), exactly as wal.c computes it. The exception is the transaction being
**   written: a page written twice in one transaction is overwritten in its frame, and SQLite rewrites the
**   checksums from there on only at the commit; a frame past the WAL index's last committed frame is the
**   writer's own, read back within its transaction (no other connection reads past the frames committed
**   when its read began), and is not refused.
** Memory-mapped reads of a checksummed database and reads of part of a page are turned off, so that every page
** read goes whole through xRead.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define VFS_NAME "diskless-checksums"
#define CHECKSUM_BYTES 8
#define WAL_HEADER_BYTES 32
#define FRAME_HEADER_BYTES 24
#define INDEX_HEADER_BYTES 48 /* a copy of the WAL index header at the start of -shm (mxFrame at 16) */
#define DAMAGE_MESSAGE_BYTES 1024
#ifndef SQLITE_IOCAP_SUBPAGE_READ
#define SQLITE_IOCAP_SUBPAGE_READ 0x00008000 /* SQLite 3.48 and later; Debian's header may be older */
#endif

typedef uint32_t u32;
typedef uint8_t u8;

/* The last damage a read on this thread met, for the Python caller that gets SQLITE_IOERR_DATA. */
static __thread char last_damage[DAMAGE_MESSAGE_BYTES];

typedef struct CheckedFile CheckedFile;
struct CheckedFile {
  sqlite3_file base;
  const char *name;      /* as SQLite opened it (SQLite keeps it alive while the file is open) */
  int is_wal;
  int checksummed;       /* this database file's header said 8 reserved bytes */
  int ever_checksummed;  /* ... at least once: it never loses its checksums */
  CheckedFile *partner;  /* the WAL of a database file, the database file of a WAL */
  /* The WAL's header as last read: read again when a frame's salts differ (the WAL started over). */
  int have_header;
  int big_endian;
  u32 page_size, salt1, salt2, header_check1, header_check2;
  u8 *frame;             /* a frame's header and page, read whole */
  int frame_bytes;
};

#define REAL_FILE(p) ((sqlite3_file *)(((CheckedFile *)(p)) + 1))
#define REAL_VFS(v) ((sqlite3_vfs *)((v)->pAppData))

static void record_damage(const char *format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(last_damage, sizeof(last_damage), format, args);
  va_end(args);
}

static u32 big_endian_u32(const u8 *p) {
  return ((u32)p[0] << 24) | ((u32)p[1] << 16) | ((u32)p[2] << 8) | (u32)p[3];
}

/* cksumvfs's page checksum: 32-bit words in the machine's order, in pairs, s1 += a + s2; s2 += b + s1. */
static void page_checksum(const u8 *page, int bytes, u8 *out) {
  u32 s1 = 0, s2 = 0, a, b;
  int i;
  for (i = 0; i < bytes; i += 8) {
    memcpy(&a, page + i, 4);
    memcpy(&b, page + i + 4, 4);
    s1 += a + s2;
    s2 += b + s1;
  }
  memcpy(out, &s1, 4);
  memcpy(out + 4, &s2, 4);
}

/* wal.c's running checksum over `bytes` (a multiple of 8), the words in the WAL's byte order. */
static void wal_checksum(int big_endian, const u8 *data, int bytes, u32 *s1, u32 *s2) {
  u32 x = *s1, y = *s2, a, b;
  int i;
  for (i = 0; i < bytes; i += 8) {
    if (big_endian) {
      a = big_endian_u32(data + i);
      b = big_endian_u32(data + i + 4);
    } else {
      memcpy(&a, data + i, 4);
      memcpy(&b, data + i + 4, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
      a = __builtin_bswap32(a);
      b = __builtin_bswap32(b);
#endif
    }
    x += a + y;
    y += b + x;
  }
  *s1 = x;
  *s2 = y;
}

static int is_page_size(int amount) { return amount >= 512 && amount <= 65536 && (amount & (amount - 1)) == 0; }

/* ------------------------------------------------------------------ database files */

static int header_says(CheckedFile *p, const u8 *data, int amount, sqlite3_int64 offset) {
  if (offset != 0 || amount < 100 || memcmp(data, "SQLite format 3", 16) != 0) return SQLITE_OK;
  if (data[20] == CHECKSUM_BYTES) {
    p->checksummed = p->ever_checksummed = 1;
  } else if (p->ever_checksummed) {
    record_damage("%s: its header says pages reserve %d bytes, not the %d of their checksums", p->name,
                  (int)data[20], CHECKSUM_BYTES);
    return SQLITE_IOERR_DATA;
  } else {
    p->checksummed = 0;
  }
  return SQLITE_OK;
}

static int database_read(CheckedFile *p, void *buffer, int amount, sqlite3_int64 offset) {
  sqlite3_file *real = REAL_FILE(p);
  int rc = real->pMethods->xRead(real, buffer, amount, offset);
  u8 expected[CHECKSUM_BYTES];
  if (rc != SQLITE_OK) return rc;
  rc = header_says(p, buffer, amount, offset);
  if (rc != SQLITE_OK) return rc;
  if (p->checksummed && is_page_size(amount)) {
    page_checksum(buffer, amount - CHECKSUM_BYTES, expected);
    if (memcmp((u8 *)buffer + amount - CHECKSUM_BYTES, expected, CHECKSUM_BYTES) != 0) {
      record_damage("%s: the page at offset %lld fails its checksum", p->name, (long long)offset);
      return SQLITE_IOERR_DATA;
    }
  }
  return SQLITE_OK;
}

/* ------------------------------------------------------------------ WAL files */

static int read_wal_header(CheckedFile *p) {
  sqlite3_file *real = REAL_FILE(p);
  u8 header[WAL_HEADER_BYTES];
  u32 page_size;
  int rc = real->pMethods->xRead(real, header, WAL_HEADER_BYTES, 0);
  if (rc != SQLITE_OK) {
    p->have_header = 0;
    return rc == SQLITE_IOERR_SHORT_READ ? SQLITE_OK : rc;
  }
  p->big_endian = (int)(big_endian_u32(header) & 1);
  page_size = big_endian_u32(header + 8);
  p->page_size = page_size == 1 ? 65536 : page_size;
  p->salt1 = big_endian_u32(header + 16);
  p->salt2 = big_endian_u32(header + 20);
  p->header_check1 = big_endian_u32(header + 24);
  p->header_check2 = big_endian_u32(header + 28);
  p->have_header = 1;
  return SQLITE_OK;
}

/* The WAL index's last committed frame (counted from 1), the newer of its two header copies in -shm
** (mapped by SQLite as shared memory, in this machine's byte order); every frame when it cannot be read. */
static u32 committed_frames(CheckedFile *p) {
  char shm[4096];
  u8 header[2 * INDEX_HEADER_BYTES];
  u32 first, second;
  size_t length = strlen(p->name);
  int fd;
  ssize_t got;
  if (length < 4 || length >= sizeof(shm) || strcmp(p->name + length - 4, "-wal") != 0) return UINT32_MAX;
  memcpy(shm, p->name, length - 4);
  memcpy(shm + length - 4, "-shm", 5);
  fd = open(shm, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return UINT32_MAX;
  got = pread(fd, header, sizeof(header), 0);
  close(fd);
  if (got < (ssize_t)sizeof(header)) return UINT32_MAX;
  memcpy(&first, header + 16, 4);
  memcpy(&second, header + INDEX_HEADER_BYTES + 16, 4);
  return first > second ? first : second;
}

/* SQLITE_OK if the frame verifies, else SQLITE_IOERR_DATA with the damage recorded. */
static int verify_frame(CheckedFile *p, sqlite3_int64 frame, const u8 *whole, int page_size) {
  sqlite3_file *real = REAL_FILE(p);
  u32 page = big_endian_u32(whole), salt1 = big_endian_u32(whole + 8), salt2 = big_endian_u32(whole + 12);
  u32 stored1 = big_endian_u32(whole + 16), stored2 = big_endian_u32(whole + 20);
  u32 s1, s2;
  sqlite3_int64 frame_start = WAL_HEADER_BYTES + frame * (FRAME_HEADER_BYTES + (sqlite3_int64)page_size);
  int rc;
  if (!p->have_header || salt1 != p->salt1 || salt2 != p->salt2) { /* none yet, or the WAL started over */
    rc = read_wal_header(p);
    if (rc != SQLITE_OK) return rc;
  }
  if (!p->have_header || p->page_size != (u32)page_size || salt1 != p->salt1 || salt2 != p->salt2) {
    record_damage("%s: frame %lld does not belong to the WAL (salts %08x %08x, pages of %d bytes; its header "
                  "says %08x %08x, %u)",
                  p->name, (long long)frame, salt1, salt2, page_size, p->salt1, p->salt2, p->page_size);
    return SQLITE_IOERR_DATA;
  }
  if (frame == 0) {
    s1 = p->header_check1; /* the WAL header's own checksum starts the chain */
    s2 = p->header_check2;
  } else {
    u8 previous[8];
    rc = real->pMethods->xRead(real, previous, 8, frame_start - (FRAME_HEADER_BYTES + page_size) + 16);
    if (rc != SQLITE_OK) return rc;
    s1 = big_endian_u32(previous);
    s2 = big_endian_u32(previous + 4);
  }
  wal_checksum(p->big_endian, whole, 8, &s1, &s2);
  wal_checksum(p->big_endian, whole + FRAME_HEADER_BYTES, page_size, &s1, &s2);
  if (s1 != stored1 || s2 != stored2) {
    record_damage("%s: frame %lld (page %u, its page at offset %lld) fails its checksum", p->name,
                  (long long)frame, page, (long long)(frame_start + FRAME_HEADER_BYTES));
    return SQLITE_IOERR_DATA;
  }
  return SQLITE_OK;
}

static int wal_read(CheckedFile *p, void *buffer, int amount, sqlite3_int64 offset) {
  sqlite3_file *real = REAL_FILE(p);
  sqlite3_int64 frame, rest, position = offset - WAL_HEADER_BYTES - FRAME_HEADER_BYTES;
  int rc;
  if (!is_page_size(amount) || position < 0) {
    /* headers, a checksum, a whole frame (recovery, rewrites): SQLite checks those itself */
    return real->pMethods->xRead(real, buffer, amount, offset);
  }
  frame = position / (FRAME_HEADER_BYTES + amount);
  rest = position % (FRAME_HEADER_BYTES + amount);
  if (rest != 0) return real->pMethods->xRead(real, buffer, amount, offset);
  if (p->frame_bytes < FRAME_HEADER_BYTES + amount) {
    sqlite3_free(p->frame);
    p->frame = sqlite3_malloc(FRAME_HEADER_BYTES + amount);
    p->frame_bytes = p->frame ? FRAME_HEADER_BYTES + amount : 0;
    if (p->frame == 0) return SQLITE_IOERR_NOMEM;
  }
  rc = real->pMethods->xRead(real, p->frame, FRAME_HEADER_BYTES + amount, offset - FRAME_HEADER_BYTES);
  if (rc != SQLITE_OK) return real->pMethods->xRead(real, buffer, amount, offset); /* short: SQLite's to judge */
  rc = verify_frame(p, frame, p->frame, amount);
  if (rc == SQLITE_IOERR_DATA && (u32)(frame + 1) > committed_frames(p)) {
    rc = SQLITE_OK; /* the writer's own frame, in its transaction: see the top of this file */
    last_damage[0] = 0;
  }
  if (rc != SQLITE_OK) return rc;
  memcpy(buffer, p->frame + FRAME_HEADER_BYTES, amount);
  return SQLITE_OK;
}

/* ------------------------------------------------------------------ the file's methods */

static int checked_close(sqlite3_file *file) {
  CheckedFile *p = (CheckedFile *)file;
  sqlite3_file *real = REAL_FILE(p);
  if (p->partner) {
    p->partner->partner = 0;
    p->partner = 0;
  }
  sqlite3_free(p->frame);
  p->frame = 0;
  return real->pMethods->xClose(real);
}

static int checked_read(sqlite3_file *file, void *buffer, int amount, sqlite3_int64 offset) {
  CheckedFile *p = (CheckedFile *)file;
  last_damage[0] = 0; /* what a refused read describes is always this read's */
  return p->is_wal ? wal_read(p, buffer, amount, offset) : database_read(p, buffer, amount, offset);
}

static int checked_write(sqlite3_file *file, const void *buffer, int amount, sqlite3_int64 offset) {
  CheckedFile *p = (CheckedFile *)file;
  sqlite3_file *real = REAL_FILE(p);
  if (!p->is_wal) {
    int rc = header_says(p, buffer, amount, offset);
    if (rc != SQLITE_OK) return rc;
    if (p->checksummed && is_page_size(amount)) {
      /* as cksumvfs does: SQLite's page buffers are writable and the reserved bytes are this VFS's */
      page_checksum(buffer, amount - CHECKSUM_BYTES, (u8 *)buffer + amount - CHECKSUM_BYTES);
    }
  }
  return real->pMethods->xWrite(real, buffer, amount, offset);
}

static int checked_truncate(sqlite3_file *file, sqlite3_int64 size) {
  sqlite3_file *real = REAL_FILE(file);
  return real->pMethods->xTruncate(real, size);
}

static int checked_sync(sqlite3_file *file, int flags) {
  sqlite3_file *real = REAL_FILE(file);
  return real->pMethods->xSync(real, flags);
}

static int checked_file_size(sqlite3_file *file, sqlite3_int64 *size) {
  sqlite3_file *real = REAL_FILE(file);
  return real->pMethods->xFileSize(real, size);
}

static int checked_lock(sqlite3_file *file, int level) {
  sqlite3_file *real = REAL_FILE(file);
  return real->pMethods->xLock(real, level);
}

static int checked_unlock(sqlite3_file *file, int level) {
  sqlite3_file *real = REAL_FILE(file);
  return real->pMethods->xUnlock(real, level);
}

static int checked_check_reserved_lock(sqlite3_file *file, int *out) {
  sqlite3_file *real = REAL_FILE(file);
  return real->pMethods->xCheckReservedLock(real, out);
}

static int checked_file_control(sqlite3_file *file, int op, void *argument) {
  sqlite3_file *real = REAL_FILE(file);
  int rc = real->pMethods->xFileControl(real, op, argument);
  if (rc == SQLITE_OK && op == SQLITE_FCNTL_VFSNAME) {
    *(char **)argument = sqlite3_mprintf("%s/%z", VFS_NAME, *(char **)argument);
  }
  return rc;
}

static int checked_sector_size(sqlite3_file *file) {
  sqlite3_file *real = REAL_FILE(file);
  return real->pMethods->xSectorSize(real);
}

static int checked_device_characteristics(sqlite3_file *file) {
  sqlite3_file *real = REAL_FILE(file);
  /* No reads of part of a page (SQLite reads overflow content straight from the file where allowed): a page's
  ** checksum can only be checked whole. */
  return real->pMethods->xDeviceCharacteristics(real) & ~SQLITE_IOCAP_SUBPAGE_READ;
}

static int checked_shm_map(sqlite3_file *file, int page, int page_bytes, int extend, void volatile **out) {
  sqlite3_file *real = REAL_FILE(file);
  return real->pMethods->xShmMap(real, page, page_bytes, extend, out);
}

static int checked_shm_lock(sqlite3_file *file, int offset, int n, int flags) {
  sqlite3_file *real = REAL_FILE(file);
  return real->pMethods->xShmLock(real, offset, n, flags);
}

static void checked_shm_barrier(sqlite3_file *file) {
  sqlite3_file *real = REAL_FILE(file);
  real->pMethods->xShmBarrier(real);
}

static int checked_shm_unmap(sqlite3_file *file, int delete_flag) {
  sqlite3_file *real = REAL_FILE(file);
  return real->pMethods->xShmUnmap(real, delete_flag);
}

static int checked_fetch(sqlite3_file *file, sqlite3_int64 offset, int amount, void **out) {
  CheckedFile *p = (CheckedFile *)file;
  sqlite3_file *real = REAL_FILE(file);
  if (p->checksummed || p->is_wal) { /* every page of a checksummed file through xRead, checked */
    *out = 0;
    return SQLITE_OK;
  }
  return real->pMethods->xFetch(real, offset, amount, out);
}

static int checked_unfetch(sqlite3_file *file, sqlite3_int64 offset, void *page) {
  sqlite3_file *real = REAL_FILE(file);
  return real->pMethods->xUnfetch(real, offset, page);
}

static const sqlite3_io_methods checked_methods = {
    3,
    checked_close,
    checked_read,
    checked_write,
    checked_truncate,
    checked_sync,
    checked_file_size,
    checked_lock,
    checked_unlock,
    checked_check_reserved_lock,
    checked_file_control,
    checked_sector_size,
    checked_device_characteristics,
    checked_shm_map,
    checked_shm_lock,
    checked_shm_barrier,
    checked_shm_unmap,
    checked_fetch,
    checked_unfetch,
};

/* ------------------------------------------------------------------ the VFS */

static int checked_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags, int *out_flags) {
  sqlite3_vfs *real_vfs = REAL_VFS(vfs);
  CheckedFile *p = (CheckedFile *)file;
  int rc;
  if ((flags & (SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_WAL)) == 0) {
    return real_vfs->xOpen(real_vfs, name, file, flags, out_flags); /* journals, temporary files */
  }
  memset(p, 0, sizeof(*p));
  rc = real_vfs->xOpen(real_vfs, name, REAL_FILE(p), flags, out_flags);
  if (rc != SQLITE_OK) {
    file->pMethods = 0;
    return rc;
  }
  p->name = name ? name : "(unnamed)";
  p->is_wal = (flags & SQLITE_OPEN_WAL) != 0;
  if (p->is_wal && name) {
    /* The database file object of this WAL is SQLite's top-level one: this VFS's, since a connection opens
    ** every file of a database through the same VFS. */
    CheckedFile *database = (CheckedFile *)sqlite3_database_file_object(name);
    if (database && database->base.pMethods == &checked_methods) {
      p->partner = database;
      database->partner = p;
    }
  }
  file->pMethods = &checked_methods;
  return SQLITE_OK;
}

static int checked_delete(sqlite3_vfs *vfs, const char *name, int sync_directory) {
  return REAL_VFS(vfs)->xDelete(REAL_VFS(vfs), name, sync_directory);
}
static int checked_access(sqlite3_vfs *vfs, const char *name, int flags, int *out) {
  return REAL_VFS(vfs)->xAccess(REAL_VFS(vfs), name, flags, out);
}
static int checked_full_pathname(sqlite3_vfs *vfs, const char *name, int n, char *out) {
  return REAL_VFS(vfs)->xFullPathname(REAL_VFS(vfs), name, n, out);
}
static void *checked_dl_open(sqlite3_vfs *vfs, const char *path) { return REAL_VFS(vfs)->xDlOpen(REAL_VFS(vfs), path); }
static void checked_dl_error(sqlite3_vfs *vfs, int n, char *message) {
  REAL_VFS(vfs)->xDlError(REAL_VFS(vfs), n, message);
}
static void (*checked_dl_sym(sqlite3_vfs *vfs, void *handle, const char *symbol))(void) {
  return REAL_VFS(vfs)->xDlSym(REAL_VFS(vfs), handle, symbol);
}
static void checked_dl_close(sqlite3_vfs *vfs, void *handle) { REAL_VFS(vfs)->xDlClose(REAL_VFS(vfs), handle); }
static int checked_randomness(sqlite3_vfs *vfs, int n, char *out) {
  return REAL_VFS(vfs)->xRandomness(REAL_VFS(vfs), n, out);
}
static int checked_sleep(sqlite3_vfs *vfs, int microseconds) {
  return REAL_VFS(vfs)->xSleep(REAL_VFS(vfs), microseconds);
}
static int checked_current_time(sqlite3_vfs *vfs, double *out) {
  return REAL_VFS(vfs)->xCurrentTime(REAL_VFS(vfs), out);
}
static int checked_get_last_error(sqlite3_vfs *vfs, int n, char *out) {
  return REAL_VFS(vfs)->xGetLastError(REAL_VFS(vfs), n, out);
}
static int checked_current_time_int64(sqlite3_vfs *vfs, sqlite3_int64 *out) {
  return REAL_VFS(vfs)->xCurrentTimeInt64(REAL_VFS(vfs), out);
}
static int checked_set_system_call(sqlite3_vfs *vfs, const char *name, sqlite3_syscall_ptr call) {
  return REAL_VFS(vfs)->xSetSystemCall(REAL_VFS(vfs), name, call);
}
static sqlite3_syscall_ptr checked_get_system_call(sqlite3_vfs *vfs, const char *name) {
  return REAL_VFS(vfs)->xGetSystemCall(REAL_VFS(vfs), name);
}
static const char *checked_next_system_call(sqlite3_vfs *vfs, const char *name) {
  return REAL_VFS(vfs)->xNextSystemCall(REAL_VFS(vfs), name);
}

static sqlite3_vfs checked_vfs = {
    3, 0, 1024, 0, VFS_NAME, 0, checked_open, checked_delete, checked_access, checked_full_pathname,
    checked_dl_open, checked_dl_error, checked_dl_sym, checked_dl_close, checked_randomness, checked_sleep,
    checked_current_time, checked_get_last_error, checked_current_time_int64, checked_set_system_call,
    checked_get_system_call, checked_next_system_call,
};

/* SQLite's entry point (sqlite3_load_extension): registers the VFS over "unix", not as the default. */
#ifdef _WIN32
__declspec(dllexport)
#endif
int sqlite3_checksumvfs_init(sqlite3 *db, char **error_message, const sqlite3_api_routines *api) {
  sqlite3_vfs *real;
  int rc;
  (void)db;
  (void)error_message;
  SQLITE_EXTENSION_INIT2(api);
  if (sqlite3_vfs_find(VFS_NAME) != 0) return SQLITE_OK_LOAD_PERMANENTLY;
  real = sqlite3_vfs_find("unix");
  if (real == 0) return SQLITE_ERROR;
  checked_vfs.iVersion = real->iVersion < 3 ? real->iVersion : 3;
  checked_vfs.pAppData = real;
  checked_vfs.szOsFile = (int)sizeof(CheckedFile) + real->szOsFile;
  checked_vfs.mxPathname = real->mxPathname;
  rc = sqlite3_vfs_register(&checked_vfs, 0);
  return rc == SQLITE_OK ? SQLITE_OK_LOAD_PERMANENTLY : rc;
}

/* ------------------------------------------------------------------ the Python module */

static PyObject *take_last_damage(PyObject *self, PyObject *unused) {
  PyObject *result;
  (void)self;
  (void)unused;
  if (last_damage[0] == 0) Py_RETURN_NONE;
  result = PyUnicode_DecodeUTF8(last_damage, (Py_ssize_t)strlen(last_damage), "replace");
  last_damage[0] = 0;
  return result;
}

static PyMethodDef module_methods[] = {
    {"take_last_damage", take_last_damage, METH_NOARGS,
     "The damage the last refused read on this thread met (file, offset, what failed), once; else None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_checksum_vfs",
    "The diskless-checksums SQLite VFS in C (loaded into SQLite by snapshot/page_checksums.py).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__checksum_vfs(void) { return PyModule_Create(&module); }
