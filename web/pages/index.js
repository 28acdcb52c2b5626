// The console's pages, in the nav's order: each file exports the page
// interface (docs/api.md, "The console"): { path, title, nav, roles, render }.
// One line per page.
import activity from "./activity.js";
import run from "./run.js";
import approvals from "./approvals.js";
import threads from "./threads.js";
import thread from "./thread.js";
import sandboxes from "./sandboxes.js";

export default [
  activity,
  run,
  approvals,
  threads,
  thread,
  sandboxes,
];
