// The console's pages, in the nav's order: each file exports the page
// interface (docs/api.md, "The console"): { path, title, nav, roles, render }.
// One line per page.
import activity from "./activity.js";
import run from "./run.js";
import approvals from "./approvals.js";
import threads from "./threads.js";
import thread from "./thread.js";
import sandboxes from "./sandboxes.js";
import settings from "./settings.js";
import usage from "./usage.js";
import audit from "./audit.js";
import skills from "./skills.js";
import keys from "./keys.js";

export default [
  activity,
  run,
  approvals,
  threads,
  thread,
  sandboxes,
  settings,
  usage,
  audit,
  skills,
  keys,
];
