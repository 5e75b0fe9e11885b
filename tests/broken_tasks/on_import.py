from django.tasks import task

raise RuntimeError("misconfigured at import")


@task
def task_():  # never reached
    return None
