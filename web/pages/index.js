// The console's pages, in the nav's order: each file exports the page
// interface (docs/api.md, "The console"): { path, title, nav, roles, render }.
// One line per page.
import activity from "./activity.js";

export default [
  activity,
];
