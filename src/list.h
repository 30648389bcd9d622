/* Intrusive doubly linked lists: the links are fields of the element,
 * named by the caller (next/prev, all_next/all_prev), so that one element
 * can be on several lists; the head (and tail) belong to the list's owner.
 * heap.c's slab and SuperSlab lists and large.c's span buckets. */
#ifndef HAKMEM_LIST_H
#define HAKMEM_LIST_H

#include <stddef.h>

/* x goes first on the list at head (no tail kept). */
#define HM_LIST_PUSH(head, x, next, prev) \
  do {                                     \
    (x)->prev = NULL;                      \
    (x)->next = (head);                    \
    if ((x)->next != NULL) (x)->next->prev = (x); \
    (head) = (x);                          \
  } while (0)

/* x leaves the list at head (no tail kept); its links are cleared. */
#define HM_LIST_UNLINK(head, x, next, prev)                   \
  do {                                                        \
    if ((x)->prev != NULL) (x)->prev->next = (x)->next;       \
    else (head) = (x)->next;                                  \
    if ((x)->next != NULL) (x)->next->prev = (x)->prev;       \
    (x)->next = (x)->prev = NULL;                             \
  } while (0)

/* The same for a list with a tail: x goes first, x goes last, x leaves. */
#define HM_QUEUE_PUSH_HEAD(head, tail, x, next, prev) \
  do {                                                \
    (x)->prev = NULL;                                 \
    (x)->next = (head);                               \
    if ((head) != NULL) (head)->prev = (x);           \
    else (tail) = (x);                                \
    (head) = (x);                                     \
  } while (0)

#define HM_QUEUE_PUSH_TAIL(head, tail, x, next, prev) \
  do {                                                \
    (x)->next = NULL;                                 \
    (x)->prev = (tail);                               \
    if ((x)->prev != NULL) (x)->prev->next = (x);     \
    else (head) = (x);                                \
    (tail) = (x);                                     \
  } while (0)

#define HM_QUEUE_UNLINK(head, tail, x, next, prev)            \
  do {                                                        \
    if ((x)->prev != NULL) (x)->prev->next = (x)->next;       \
    else (head) = (x)->next;                                  \
    if ((x)->next != NULL) (x)->next->prev = (x)->prev;       \
    else (tail) = (x)->prev;                                  \
    (x)->next = (x)->prev = NULL;                             \
  } while (0)

#endif /* HAKMEM_LIST_H */
