/* config.h — every tcmd setting in one table: name, type, bounds, whether
 * it can change at runtime. The command line, the config file, SIGHUP and
 * `tcmctl config set` all go through tcm__config_set. */
#ifndef TCM_CONFIG_H
#define TCM_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "server.h"

typedef struct tcm_setting_info {
    const char *name;
    bool runtime;     /* may change while tcmd runs */
    const char *help;
} tcm_setting_info_t;

/* Apply key = value. Before the segments exist (at_runtime false) every key
 * is accepted; at runtime the startup-only ones are refused. Returns 0, or
 * -ENOENT (unknown key), -EINVAL (bad value) or -EPERM (startup only) with
 * a message in err, or TCM_CONFIG_PENDING for a change the heap thread
 * applies (heap_limit at runtime: only it knows what is in use): done then
 * runs on the main loop once it is applied (rc 0) or refused (-EBUSY, a
 * resize below what is in use), with the message; NULL done: it is logged. */
#define TCM_CONFIG_PENDING 1
typedef void (*tcm_config_done_t)(tcm_server_t *srv, void *arg, int rc, const char *err);
int tcm__config_set(tcm_server_t *srv, const char *key, const char *value, bool at_runtime, char *err,
                    size_t errlen, tcm_config_done_t done, void *arg);
/* The current value of key as text; -ENOENT for an unknown key. */
int tcm__config_get(tcm_server_t *srv, const char *key, char *value, size_t len);
/* Every setting at its default (before the file and the command line). */
void tcm__config_defaults(tcm_server_t *srv);
/* One --help line per setting: option, value, help, default. */
void tcm__config_usage(FILE *f);
/* name TAB runtime(yes/no) TAB default TAB value name TAB help, one line
 * each (tcmd --list-settings: the README's table is checked against it, the
 * man page is made from it). */
void tcm__config_list(FILE *f);
/* The settings, in order; NULL past the end. */
const tcm_setting_info_t *tcm__config_setting(size_t i);
/* The setting key names, its name as the table has it (hyphens are underscores), or NULL. */
const char *tcm__config_key(const char *key);
/* Load a file of `key = value` lines; logs or prints each bad line. */
int tcm__config_load(tcm_server_t *srv, const char *path, bool at_runtime);
/* Push the settings that live in the metadata segment to it (after start,
 * and after each change), bumping the generation clients watch. */
void tcm__config_publish(tcm_server_t *srv);

/* The startup settings together, once all are set: the heap a whole number
 * of pages, and ending inside the address space at its base. Returns 0, or
 * -EINVAL with a message in err. */
int tcm__config_check(const tcm_server_t *srv, char *err, size_t errlen);

/* An adopted heap keeps its runtime settings (a resize, a budget set with
 * tcmctl) unless this tcmd was given them on its command line or file. */
void tcm__config_adopt(tcm_server_t *srv);

#endif
