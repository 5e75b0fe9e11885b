from django.tasks import task

from . import conf, services


# Many attempts: a runner killed with its worker is swept back to ready and resumes the run
# where the last committed batch left it.
@task(queue_name=conf.get("QUEUE"), max_attempts=25)
def carry_out_run(run_id: int, generation: int):
    services.carry_out(run_id, generation)
