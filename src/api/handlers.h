/* The handlers of every surface, by module: what the route table
 * (routes.c) points at. A surface's module declares its handlers here. */
#pragma once

#include "e2b.h"
#include "route.h"

/* ops.c: health, the OpenAPI document, the operator's figures */
enum MHD_Result al_ops_health(al_route_ctx *x);
enum MHD_Result al_ops_openapi(al_route_ctx *x);
enum MHD_Result al_ops_metrics(al_route_ctx *x);
enum MHD_Result al_ops_status(al_route_ctx *x);
/* console.c: the web console's shell and assets (web/, built in) */
enum MHD_Result al_console_shell(al_route_ctx *x);
enum MHD_Result al_console_asset(al_route_ctx *x);
enum MHD_Result al_console_page(al_route_ctx *x);
/* piston_route.c: Piston's API under /piston/KEY/ */
enum MHD_Result al_piston_route_runtimes(al_route_ctx *x);
enum MHD_Result al_piston_route_execute(al_route_ctx *x);
enum MHD_Result al_piston_route_packages(al_route_ctx *x);
enum MHD_Result al_piston_route_other(al_route_ctx *x);
/* mcp.c: MCP over Streamable HTTP (it answers each method itself) */
enum MHD_Result al_mcp_route(al_route_ctx *x);
/* rest_runs.c */
enum MHD_Result al_rest_runs_create(al_route_ctx *x);
enum MHD_Result al_rest_runs_list(al_route_ctx *x);
enum MHD_Result al_rest_runs_get(al_route_ctx *x);
enum MHD_Result al_rest_runs_trace(al_route_ctx *x);
enum MHD_Result al_rest_runs_input(al_route_ctx *x);
enum MHD_Result al_rest_runs_approve(al_route_ctx *x);
enum MHD_Result al_rest_runs_deny(al_route_ctx *x);
enum MHD_Result al_rest_runs_cancel(al_route_ctx *x);
/* rest_events.c: the workspace's activity as Server-Sent Events */
enum MHD_Result al_rest_events(al_route_ctx *x);
/* rest_workspace.c: the workspace's people, threads and sandboxes */
enum MHD_Result al_rest_persons(al_route_ctx *x);
enum MHD_Result al_rest_threads(al_route_ctx *x);
enum MHD_Result al_rest_sandboxes(al_route_ctx *x);
enum MHD_Result al_rest_sandbox_files(al_route_ctx *x);
enum MHD_Result al_rest_sandbox_kill(al_route_ctx *x);
/* sse.c: a run's events as Server-Sent Events */
enum MHD_Result al_sse_run_events(al_route_ctx *x);
/* rest_artifacts.c, rest_threads.c */
enum MHD_Result al_rest_artifact_get(al_route_ctx *x);
enum MHD_Result al_rest_artifact_content(al_route_ctx *x);
enum MHD_Result al_rest_thread_artifacts(al_route_ctx *x);
/* rest_folders.c */
enum MHD_Result al_rest_folders(al_route_ctx *x);
enum MHD_Result al_rest_folder_entries(al_route_ctx *x);
enum MHD_Result al_rest_thread_packages(al_route_ctx *x);
/* rest_skills.c */
enum MHD_Result al_rest_skills_upload(al_route_ctx *x);
enum MHD_Result al_rest_skills_list(al_route_ctx *x);
enum MHD_Result al_rest_skills_get(al_route_ctx *x);
enum MHD_Result al_rest_skills_delete(al_route_ctx *x);
enum MHD_Result al_rest_skills_delete_version(al_route_ctx *x);
enum MHD_Result al_rest_skills_run(al_route_ctx *x);
enum MHD_Result al_rest_skills_test(al_route_ctx *x);
enum MHD_Result al_rest_skills_promote(al_route_ctx *x);
/* rest_settings.c, rest_usage.c, rest_admin.c */
enum MHD_Result al_rest_settings_get(al_route_ctx *x);
enum MHD_Result al_rest_settings_put(al_route_ctx *x);
enum MHD_Result al_rest_usage(al_route_ctx *x);
enum MHD_Result al_rest_audit(al_route_ctx *x);
enum MHD_Result al_rest_audit_checkpoint(al_route_ctx *x);
/* rest_audit_export.c: the chain verified */
enum MHD_Result al_rest_audit_verify(al_route_ctx *x);
/* rest_session.c: the console's sign-in (POST, GET, DELETE /v1/session)
 * and a person's API keys (/v1/keys) */
enum MHD_Result al_rest_session_create(al_route_ctx *x);
enum MHD_Result al_rest_session_get(al_route_ctx *x);
enum MHD_Result al_rest_session_delete(al_route_ctx *x);
enum MHD_Result al_rest_keys_list(al_route_ctx *x);
enum MHD_Result al_rest_keys_create(al_route_ctx *x);
enum MHD_Result al_rest_keys_revoke(al_route_ctx *x);
/* e2b.c: E2B's control plane (sandboxes); e2b_files.c: its sandbox plane's
 * health, files and filesystem.Filesystem */
enum MHD_Result al_e2b_create(al_route_ctx *x);
enum MHD_Result al_e2b_list(al_route_ctx *x);
enum MHD_Result al_e2b_get(al_route_ctx *x);
enum MHD_Result al_e2b_kill(al_route_ctx *x);
enum MHD_Result al_e2b_timeout(al_route_ctx *x);
enum MHD_Result al_e2b_refresh(al_route_ctx *x);
enum MHD_Result al_e2b_connect(al_route_ctx *x);
enum MHD_Result al_e2b_pause(al_route_ctx *x);
enum MHD_Result al_e2b_resume(al_route_ctx *x);
enum MHD_Result al_e2b_unsupported(al_route_ctx *x);
enum MHD_Result al_e2b_health(al_route_ctx *x);
enum MHD_Result al_e2b_files_get(al_route_ctx *x);
enum MHD_Result al_e2b_files_post(al_route_ctx *x);
enum MHD_Result al_e2b_filesystem(al_route_ctx *x);
enum MHD_Result al_e2b_sandbox_unknown(al_route_ctx *x);
/* e2b_process.c: envd's process.Process (commands); e2b_execute.c: the
 * code interpreter's /execute and its contexts */
enum MHD_Result al_e2b_process(al_route_ctx *x);
enum MHD_Result al_e2b_execute(al_route_ctx *x);
enum MHD_Result al_e2b_contexts_create(al_route_ctx *x);
enum MHD_Result al_e2b_contexts_list(al_route_ctx *x);
enum MHD_Result al_e2b_contexts_delete(al_route_ctx *x);
enum MHD_Result al_e2b_contexts_restart(al_route_ctx *x);
