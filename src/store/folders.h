/*
 * Connected folders' rows (store/folders.c): a directory of the host lent
 * to a workspace by name, with its identity as registered. What the rows
 * mean (opening beneath the root, the caps, the hashes) is the core's
 * (core/folders.c).
 */
#pragma once

#include "store.h"

typedef struct al_store_folder {
    char org_id[40], workspace_id[40];
    char name[65];
    char *path;                   /* owned: the host directory, absolute */
    char *glob;                   /* owned: "" for every file */
    uint64_t dev, ino;            /* its identity when registered */
    char created_at[40];
} al_store_folder;

void al_store_folder_done(al_store_folder *f);
void al_store_folders_free(al_store_folder *v, size_t n);

/* Record F: -EEXIST when its workspace has a folder of that name, -ENOENT
 * when there is no such workspace (F's org_id is the workspace's). */
int al_store_folder_add(al_store *s, al_store_folder *f, al_error *err);
/* Folder NAME of WS_ID in *RET: 0, -ENOENT, -errno. */
int al_store_folder_get(al_store *s, const char *ws_id, const char *name, al_store_folder *ret, al_error *err);
/* WS_ID's folders by name, at most LIMIT. */
int al_store_folders_list(al_store *s, const char *ws_id, int64_t limit, al_store_folder **ret, size_t *ret_n,
                          al_error *err);
/* Remove folder NAME of WS_ID: 1, 0 when there was none. */
int al_store_folder_remove(al_store *s, const char *ws_id, const char *name, al_error *err);
