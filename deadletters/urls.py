from django.urls import path, re_path

from . import views

app_name = "deadletters"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("list/", views.letter_list, name="list"),
    path("list/count/", views.matching_count, name="count"),
    path("<int:pk>/", views.letter_detail, name="detail"),
    path("preview/", views.preview, name="preview"),
    path("selections/<int:pk>/", views.confirm, name="confirm"),
    path("runs/<int:pk>/", views.run_detail, name="run"),
    re_path(
        r"^runs/(?P<pk>[0-9]+)/(?P<command>pause|resume|cancel)/$",
        views.run_control,
        name="run-control",
    ),
    path("audit/", views.audit, name="audit"),
]
