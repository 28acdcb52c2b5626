/* The steps a box's PID 1 takes inside its new namespaces, shared by the
 * made box (child.c) and the box a zygote forks (fork_init.c, run in the
 * zygote's interpreter as a shared object of these same files), and the
 * parent's one step for it, its maps (box.c's, and a zygote's for its
 * boxes, zygote.c). Each returns 0 or a negative errno with ERR set. */
#pragma once

#include <stdbool.h>

#include "box.h"

#define AL_SANDBOX_ID 65534

/* {step, errno, message} to the parent (AL_MSG_ERROR on SOCK). */
void al_setup_say_error(int sock, const al_error *e);
/* The same, then _exit(125). */
_Noreturn void al_setup_fail(int sock, al_error *e);

/* sync 1: the parent's go (the box's maps written) */
int al_setup_wait_go(int sock, al_error *err);
/* sync 3: the go, with the cgroup's self-join fds (v1) written at once */
int al_setup_wait_go_and_join(int sock, al_error *err);

/* The sandbox id (or a zygote's 0), its capabilities kept for the mounts. */
int al_setup_identity(bool zygote, al_error *err);
int al_setup_loopback(al_error *err);
/* No nested user namespace, and a box's own share of the inotify
 * instances and watches its creator's user (host root) may hold: with the
 * host's default of 128 instances, 15 boxes at once leave root some. */
#define AL_BOX_INOTIFY_INSTANCES_N 8
#define AL_BOX_INOTIFY_INSTANCES AL_STRINGIFY(AL_BOX_INOTIFY_INSTANCES_N)
#define AL_BOX_INOTIFY_WATCHES "8192"
int al_setup_no_nested_userns(al_error *err);
/* What a box's processes may charge to the per-user counts of the user
 * that made its user namespace (host root): the kernel adds them up along
 * the namespaces' chain, so without these one box could take root's whole
 * share, leaving none to root and to every other box. No POSIX message
 * queue (root has 800 KiB of them in all), and 256 queued signals of
 * root's ~96,000 (a box queued all of them once: root could queue none). */
#define AL_BOX_MSGQUEUE_BYTES 0
#define AL_BOX_SIGPENDING 256
/* NOFILE, FSIZE, CORE, MSGQUEUE; NPROC (pids + 16) when NPROC_TOO;
 * SIGPENDING unless ZYGOTE (one budget for every box it forks, whose
 * namespaces are its children: each box sets its own). */
int al_setup_rlimits(const al_box_limits *l, bool nproc_too, bool zygote, al_error *err);
/* no_new_privs and every capability gone (a zygote keeps CAP_SETUID/GID),
 * not dumpable. */
int al_setup_drop_privileges(bool zygote, al_error *err);
/* PID 1's signals: SIGPIPE ignored, every other at its default (but
 * SIGCHLD where KEEP_CHLD: its own handler), whatever the process that made
 * the box had: a service started under nohup or in a shell's background
 * ignores SIGHUP, SIGINT and SIGQUIT, and the script would inherit that
 * (Python then installs no KeyboardInterrupt handler). */
void al_setup_init_signals(bool keep_chld);
/* PID 1's argv and environment (a copy of its parent's) blanked. */
void al_setup_scrub_cmdline(void);
/* Every fd closed but *FDS[0..N) (those < 0 skipped), each moved to 64 or
 * above (close-on-exec) and updated. */
int al_setup_keep_fds(int *const *fds, size_t n);

/* The parent's side of sync 1: setgroups denied, then UID_MAP and
 * GID_MAP ("INSIDE HOST COUNT" lines) written for PID. */
int al_setup_write_maps(pid_t pid, const char *uid_map, const char *gid_map, al_error *err);
