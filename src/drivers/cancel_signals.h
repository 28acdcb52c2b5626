#pragma once

/* Block SIGINT, SIGTERM and SIGHUP and return a signalfd for them: the box
 * is canceled cleanly instead of dying with us. */
int al_cancel_signals(void);
