// The console's pages, in the nav's order: each file exports the page
// interface (docs/api.md, "The console"): { path, title, nav, roles, render }.
// One line per page.
import activity from "./activity.js";
import settings from "./settings.js";
import usage from "./usage.js";
import audit from "./audit.js";
import skills from "./skills.js";
import keys from "./keys.js";

export default [
  activity,
  settings,
  usage,
  audit,
  skills,
  keys,
];
