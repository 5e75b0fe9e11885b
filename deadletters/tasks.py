from django.tasks import task

from jobqueue.conf import setting


# Many attempts: a runner killed with its worker is swept back to ready and resumes the run
# where the last committed batch left it. A paced run is a chain of these, each carrying out
# what is due and enqueueing the next for when the next item is (never sleeping in the slot).
@task(queue_name=setting("REPLAY_QUEUE"), max_attempts=25)
def carry_out_run(run_id: int, generation: int):
    # Imported when a run is carried out, not with this module: every worker imports it at
    # start-up (the task-timeout check reads each app's tasks), and the console's services
    # pull in most of the console.
    from . import services

    services.run_due(run_id, generation)
