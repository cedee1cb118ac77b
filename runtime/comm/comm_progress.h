/*
 * comm_progress.h: non-blocking transfers that move while the rank computes
 * (comm_progress.c). Not for lectures.
 *
 * Open MPI moves a message only while some thread of the rank is inside an
 * MPI call. A backend hands each non-blocking call's requests to this
 * module; a thread of the rank's own then calls MPI_Testall on them every
 * LECTERN_PROGRESS_US microseconds (default 20; at nice 19,
 * LECTERN_PROGRESS_NICE) until they complete or the
 * lecture's thread waits for them itself (lx_progress_claim). A collective
 * may also be *started* by that thread (lx_progress_launch): starting one
 * can take milliseconds of copying inside Open MPI, which the lecture's
 * thread then does not wait for. When nothing is in flight the thread
 * sleeps on a condition variable and costs nothing.
 */
#ifndef LECTERN_COMM_PROGRESS_H
#define LECTERN_COMM_PROGRESS_H

#include <mpi.h>

typedef struct lx_progress_group lx_progress_group;

/* After MPI_Init_thread: `provided` is the thread level Open MPI gave. Below
 * MPI_THREAD_MULTIPLE the thread is never started (requests then move only
 * inside MPI calls) and lx_progress_active() says 0. */
void lx_progress_init(int provided);

/* 1 when a progress thread serves this rank's requests (MPI_THREAD_MULTIPLE,
 * LECTERN_PROGRESS not 0, not turned off by lx_progress_set). */
int lx_progress_active(void);

/* The requests reqs[0..n) were just started on this thread: keep them
 * moving. The array must stay where it is until lx_progress_claim returns.
 * NULL when the thread is off (claim accepts NULL). */
lx_progress_group *lx_progress_watch(MPI_Request *reqs, int n);

/* start(ctx) starts the requests reqs[0..n) (an MPI_Iallreduce ...) and
 * returns the MPI call's code. With
 * the thread on, it runs there, in the order of the launches, and the call
 * returns at once; otherwise it runs here, now, and NULL is returned. Every
 * collective launched this way must use a communicator no other thread
 * starts collectives on: MPI matches collectives by their order on each
 * communicator, and only the launch order is kept. */
lx_progress_group *lx_progress_launch(int (*start)(void *ctx), void *ctx, MPI_Request *reqs, int n);

/* The lecture's thread is about to wait for the group's requests itself
 * (MPI_Waitall on the same array): waits until the group was started, and
 * takes it back from the thread. Frees g. An MPI error met on the thread
 * (starting or testing) is reported here, at the wait, as MPI_CHECK would,
 * naming `call`. */
void lx_progress_claim(lx_progress_group *g, const char *call);

/* 1 when every request of the group has completed; the group stays the
 * thread's until lx_progress_claim. 0 while it is not started yet, or the
 * thread is testing it now. An MPI error is reported here, naming `call`. */
int lx_progress_test(lx_progress_group *g, const char *call);

/* For tests and bench/: turns the thread off (0) or on (1) for the calls
 * made from now on in this process. LECTERN_PROGRESS=0 starts it off. */
void lx_progress_set(int on);

/* Stops the thread (the pool rank leaves, or the process exits). Safe to
 * call twice. */
void lx_progress_stop(void);

/* One pass over the transfers in flight, made by the calling thread (the
 * progress thread's work, at the caller's priority): model_compute calls it
 * while it sleeps. Nothing when nothing is in flight. Returns 1 when some
 * are still in flight after it. */
int lx_progress_drive(void);

/* While on, the progress thread makes no pass (it finishes the one it is
 * in): the caller drives instead (lx_progress_drive). At nice 19 the thread
 * can be preempted for milliseconds by other processes in the middle of an
 * MPI call on a group, which the caller's pass and wait must then wait for;
 * model_compute holds it while it sleeps and drives. */
void lx_progress_hold(int on);

#endif /* LECTERN_COMM_PROGRESS_H */
