/* Intrusive doubly linked lists: the forward link is a field of the
 * element, named by the caller (next, all_next); the back link is found by
 * an accessor, PREV(x) an lvalue (HM_PREV: the field `prev`; heap.c's
 * slabs keep theirs out of the descriptor), so that one element can be on
 * several lists; the head (and tail) belong to the list's owner. heap.c's
 * slab and SuperSlab lists and large.c's span buckets. */
#ifndef HAKMEM_LIST_H
#define HAKMEM_LIST_H

#include <stddef.h>

#define HM_PREV(x) ((x)->prev)

/* x goes first on the list at head (no tail kept). */
#define HM_LIST_PUSH(head, x, next, PREV) \
  do {                                     \
    PREV(x) = NULL;                        \
    (x)->next = (head);                    \
    if ((x)->next != NULL) PREV((x)->next) = (x); \
    (head) = (x);                          \
  } while (0)

/* x leaves the list at head (no tail kept); its links are cleared. */
#define HM_LIST_UNLINK(head, x, next, PREV)                   \
  do {                                                        \
    if (PREV(x) != NULL) PREV(x)->next = (x)->next;           \
    else (head) = (x)->next;                                  \
    if ((x)->next != NULL) PREV((x)->next) = PREV(x);         \
    (x)->next = NULL;                                         \
    PREV(x) = NULL;                                           \
  } while (0)

/* The same for a list with a tail: x goes first, x goes last, x leaves. */
#define HM_QUEUE_PUSH_HEAD(head, tail, x, next, PREV) \
  do {                                                \
    PREV(x) = NULL;                                   \
    (x)->next = (head);                               \
    if ((head) != NULL) PREV(head) = (x);             \
    else (tail) = (x);                                \
    (head) = (x);                                     \
  } while (0)

#define HM_QUEUE_PUSH_TAIL(head, tail, x, next, PREV) \
  do {                                                \
    (x)->next = NULL;                                 \
    PREV(x) = (tail);                                 \
    if (PREV(x) != NULL) PREV(x)->next = (x);         \
    else (head) = (x);                                \
    (tail) = (x);                                     \
  } while (0)

#define HM_QUEUE_UNLINK(head, tail, x, next, PREV)            \
  do {                                                        \
    if (PREV(x) != NULL) PREV(x)->next = (x)->next;           \
    else (head) = (x)->next;                                  \
    if ((x)->next != NULL) PREV((x)->next) = PREV(x);         \
    else (tail) = PREV(x);                                    \
    (x)->next = NULL;                                         \
    PREV(x) = NULL;                                           \
  } while (0)

#endif /* HAKMEM_LIST_H */
