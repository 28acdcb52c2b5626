/* Many nodes on one store (cluster.c; docs/operations.md "Many nodes"). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../store/store.h"

typedef struct al_service al_service;

int al_cluster_start(al_service *s, al_error *err);
void al_cluster_stop(al_service *s);
/* Declare dead the nodes whose lease ran out (ALL_OTHERS: every other
 * node, which SQLite's one node does at start) and end their runs. */
void al_cluster_reap(al_service *s, bool all_others);
/* The scheduler's periodic share of it: dead nodes, and cancels of this
 * node's runs asked elsewhere (a notification may have been lost). */
void al_cluster_tick(al_service *s);
