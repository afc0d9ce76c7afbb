/* cflags: -static */
/* The record job's /proc reader, as one process: under TCG every fork and exec of a busybox
 * applet costs tens of milliseconds, and reading /proc with `cat` and `readlink` per file took
 * 10 to 50 s of each recording. It writes the layout corpus/facts.py parses.
 *
 *   procfacts group PGID           pids of the processes in process group PGID, one per line
 *   procfacts group-states PGID    the state letter of every task (threads too) in PGID
 *   procfacts collect DIR PID...   DIR/proc/P/{stat,status,cmdline,cgroup,ns} for every process
 *                                  P, and for each PID given: maps, limits, timers, personality,
 *                                  mountinfo, environ, fds, fdinfo/, task/, exe, cwd, root
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const PROCESS_FILES[] = {"stat", "status", "cmdline", "cgroup"};
static const char *const MEMBER_FILES[] = {"maps", "limits", "timers", "personality", "mountinfo", "environ"};
static const char *const NAMESPACES[] = {"pid", "pid_for_children", "mnt",  "net",  "uts",
                                         "ipc", "user",             "cgroup", "time", "time_for_children"};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static int all_digits(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return 0;
    return 1;
}

/* The whole of a /proc file into dst; a file that is gone leaves dst empty, as `cat f > dst`. */
static void copy_file(const char *src, const char *dst) {
    char buf[65536];
    int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0) {
        perror(dst);
        exit(1);
    }
    int in = open(src, O_RDONLY);
    if (in >= 0) {
        ssize_t n;
        while ((n = read(in, buf, sizeof buf)) > 0)
            if (write(out, buf, n) != n) {
                perror(dst);
                exit(1);
            }
        close(in);
    }
    close(out);
}

static void write_text(const char *dst, const char *text) {
    FILE *f = fopen(dst, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        perror(dst);
        exit(1);
    }
}

/* readlink's target and a newline, or an empty file, as `readlink f > dst`. */
static void link_file(const char *src, const char *dst) {
    char target[PATH_MAX + 2];
    ssize_t n = readlink(src, target, PATH_MAX);
    if (n < 0) n = 0;
    else target[n++] = '\n';
    target[n] = 0;
    write_text(dst, target);
}

static void make_dir(const char *path) {
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        perror(path);
        exit(1);
    }
}

/* State, process group of /proc/.../stat: comm may hold ") ", so parse after the last ')'. */
static int read_stat(const char *path, char *state, long *pgrp) {
    char buf[1024];
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    char *rest = strrchr(buf, ')');
    long ppid;
    return rest && sscanf(rest + 1, " %c %ld %ld", state, &ppid, pgrp) == 3;
}

static void print_group(long group, int states) {
    DIR *proc = opendir("/proc");
    struct dirent *e;
    char path[PATH_MAX], state;
    long pgrp;
    while (proc && (e = readdir(proc))) {
        if (!all_digits(e->d_name)) continue;
        if (!states) {
            snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
            if (read_stat(path, &state, &pgrp) && pgrp == group) printf("%s\n", e->d_name);
            continue;
        }
        snprintf(path, sizeof path, "/proc/%s/task", e->d_name);
        DIR *tasks = opendir(path);
        struct dirent *t;
        while (tasks && (t = readdir(tasks))) {
            if (!all_digits(t->d_name)) continue;
            snprintf(path, sizeof path, "/proc/%s/task/%s/stat", e->d_name, t->d_name);
            if (read_stat(path, &state, &pgrp) && pgrp == group) printf("%c\n", state);
        }
        if (tasks) closedir(tasks);
    }
    if (proc) closedir(proc);
}

static void collect_process(const char *dir, const char *pid) {
    char src[PATH_MAX], dst[PATH_MAX], target[PATH_MAX], line[2 * PATH_MAX];
    snprintf(dst, sizeof dst, "%s/proc/%s", dir, pid);
    make_dir(dst);
    for (size_t i = 0; i < COUNT(PROCESS_FILES); i++) {
        snprintf(src, sizeof src, "/proc/%s/%s", pid, PROCESS_FILES[i]);
        snprintf(dst, sizeof dst, "%s/proc/%s/%s", dir, pid, PROCESS_FILES[i]);
        copy_file(src, dst);
    }
    snprintf(dst, sizeof dst, "%s/proc/%s/ns", dir, pid);
    FILE *ns = fopen(dst, "w");
    if (!ns) {
        perror(dst);
        exit(1);
    }
    for (size_t i = 0; i < COUNT(NAMESPACES); i++) {
        snprintf(src, sizeof src, "/proc/%s/ns/%s", pid, NAMESPACES[i]);
        ssize_t n = readlink(src, target, sizeof target - 1);
        target[n < 0 ? 0 : n] = 0;
        snprintf(line, sizeof line, "%s %s\n", NAMESPACES[i], target);
        fputs(line, ns);
    }
    if (fclose(ns) != 0) {
        perror(dst);
        exit(1);
    }
}

static void collect_member(const char *dir, const char *pid) {
    char src[PATH_MAX], dst[PATH_MAX], target[PATH_MAX];
    for (size_t i = 0; i < COUNT(MEMBER_FILES); i++) {
        snprintf(src, sizeof src, "/proc/%s/%s", pid, MEMBER_FILES[i]);
        snprintf(dst, sizeof dst, "%s/proc/%s/%s", dir, pid, MEMBER_FILES[i]);
        copy_file(src, dst);
    }
    static const char *const LINKS[] = {"exe", "cwd", "root"};
    for (size_t i = 0; i < COUNT(LINKS); i++) {
        snprintf(src, sizeof src, "/proc/%s/%s", pid, LINKS[i]);
        snprintf(dst, sizeof dst, "%s/proc/%s/%s", dir, pid, LINKS[i]);
        link_file(src, dst);
    }
    snprintf(dst, sizeof dst, "%s/proc/%s/fdinfo", dir, pid);
    make_dir(dst);
    snprintf(dst, sizeof dst, "%s/proc/%s/task", dir, pid);
    make_dir(dst);

    snprintf(dst, sizeof dst, "%s/proc/%s/fds", dir, pid);
    FILE *fds = fopen(dst, "w");
    if (!fds) {
        perror(dst);
        exit(1);
    }
    snprintf(src, sizeof src, "/proc/%s/fd", pid);
    DIR *fd_dir = opendir(src);
    struct dirent *e;
    while (fd_dir && (e = readdir(fd_dir))) {
        if (!all_digits(e->d_name)) continue;
        snprintf(src, sizeof src, "/proc/%s/fd/%s", pid, e->d_name);
        ssize_t n = readlink(src, target, sizeof target - 1);
        target[n < 0 ? 0 : n] = 0;
        fprintf(fds, "%s %s\n", e->d_name, target);
        snprintf(src, sizeof src, "/proc/%s/fdinfo/%s", pid, e->d_name);
        snprintf(dst, sizeof dst, "%s/proc/%s/fdinfo/%s", dir, pid, e->d_name);
        copy_file(src, dst);
    }
    if (fd_dir) closedir(fd_dir);
    if (fclose(fds) != 0) {
        perror("fds");
        exit(1);
    }

    snprintf(src, sizeof src, "/proc/%s/task", pid);
    DIR *task_dir = opendir(src);
    while (task_dir && (e = readdir(task_dir))) {
        if (!all_digits(e->d_name)) continue;
        snprintf(dst, sizeof dst, "%s/proc/%s/task/%s", dir, pid, e->d_name);
        make_dir(dst);
        static const char *const TASK_FILES[] = {"stat", "status"};
        for (size_t i = 0; i < COUNT(TASK_FILES); i++) {
            snprintf(src, sizeof src, "/proc/%s/task/%s/%s", pid, e->d_name, TASK_FILES[i]);
            snprintf(dst, sizeof dst, "%s/proc/%s/task/%s/%s", dir, pid, e->d_name, TASK_FILES[i]);
            copy_file(src, dst);
        }
    }
    if (task_dir) closedir(task_dir);
}

static void collect(const char *dir, int members, char **member_pids) {
    char path[PATH_MAX], self[32];
    snprintf(self, sizeof self, "%d", getpid());
    snprintf(path, sizeof path, "%s/proc", dir);
    make_dir(dir);
    make_dir(path);
    DIR *proc = opendir("/proc");
    struct dirent *e;
    while (proc && (e = readdir(proc)))
        /* not this reader itself: it is gone before the host pauses the guest */
        if (all_digits(e->d_name) && strcmp(e->d_name, self) != 0) collect_process(dir, e->d_name);
    if (proc) closedir(proc);
    for (int i = 0; i < members; i++) {
        snprintf(path, sizeof path, "/proc/%s", member_pids[i]);
        if (all_digits(member_pids[i]) && access(path, F_OK) == 0) {
            snprintf(path, sizeof path, "%s/proc/%s", dir, member_pids[i]);
            make_dir(path);
            collect_member(dir, member_pids[i]);
        }
    }
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "group")) print_group(atol(argv[2]), 0);
    else if (argc == 3 && !strcmp(argv[1], "group-states")) print_group(atol(argv[2]), 1);
    else if (argc >= 3 && !strcmp(argv[1], "collect")) collect(argv[2], argc - 3, argv + 3);
    else {
        fprintf(stderr, "usage: procfacts group PGID | group-states PGID | collect DIR PID...\n");
        return 2;
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
